"""The pure evidence layer: Merkle tree, signed checkpoints, export bundles (no Django)."""
