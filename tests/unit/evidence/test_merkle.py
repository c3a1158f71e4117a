"""audit.evidence.merkle against the RFC 6962 reference vectors, exhaustive small trees, and
tampering."""

import hashlib

import pytest

from audit.evidence import merkle

# The Certificate Transparency reference inputs and tree heads (RFC 6962 test data, as used by
# the CT and transparency-dev Merkle implementations).
CT_LEAVES = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = [
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]
CT_CONSISTENCY = [
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        2,
        8,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]

N = 40
LEAVES = [f"leaf {i}".encode() for i in range(N)]
ROOTS = [merkle.root(LEAVES[:n]) for n in range(N + 1)]


def flipped(proof: list[bytes], element: int, bit: int) -> list[bytes]:
    out = list(proof)
    b = bytearray(out[element])
    b[bit // 8] ^= 1 << (bit % 8)
    out[element] = bytes(b)
    return out


def test_hash_prefixes():
    assert merkle.leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    a, b = merkle.leaf_hash(b"a"), merkle.leaf_hash(b"b")
    assert merkle.node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert merkle.root([]) == merkle.EMPTY_ROOT == hashlib.sha256(b"").digest()


def test_reference_roots():
    for n in range(len(CT_LEAVES) + 1):
        assert merkle.root(CT_LEAVES[:n]).hex() == CT_ROOTS[n], f"size {n}"
    hashes = [merkle.leaf_hash(x) for x in CT_LEAVES]
    assert merkle.root_from_hashes(hashes).hex() == CT_ROOTS[8]


@pytest.mark.parametrize(("index", "size", "path"), CT_INCLUSION)
def test_reference_inclusion_proofs(index, size, path):
    proof = merkle.inclusion_proof(index, CT_LEAVES[:size])
    assert [p.hex() for p in proof] == path
    leaf = merkle.leaf_hash(CT_LEAVES[index])
    assert merkle.verify_inclusion(index, size, leaf, proof, bytes.fromhex(CT_ROOTS[size]))


@pytest.mark.parametrize(("old", "new", "path"), CT_CONSISTENCY)
def test_reference_consistency_proofs(old, new, path):
    proof = merkle.consistency_proof(old, CT_LEAVES[:new])
    assert [p.hex() for p in proof] == path
    old_root, new_root = bytes.fromhex(CT_ROOTS[old]), bytes.fromhex(CT_ROOTS[new])
    assert merkle.verify_consistency(old, new, old_root, new_root, proof)
    assert not merkle.verify_consistency(old, new, new_root, old_root, proof)


def test_every_inclusion_proof_of_trees_up_to_40_verifies_and_only_there():
    for size in range(1, N + 1):
        leaves, root = LEAVES[:size], ROOTS[size]
        for index in range(size):
            proof = merkle.inclusion_proof(index, leaves)
            leaf = merkle.leaf_hash(leaves[index])
            assert merkle.verify_inclusion(index, size, leaf, proof, root), (index, size)
            # The same proof proves nothing for another position, size, leaf or root.
            assert not merkle.verify_inclusion(index, size, leaf, proof, ROOTS[size - 1])
            other = merkle.leaf_hash(leaves[(index + 1) % size])
            if size > 1:
                assert not merkle.verify_inclusion(index, size, other, proof, root)
                assert not merkle.verify_inclusion((index + 1) % size, size, leaf, proof, root)
            if size < N:  # (the size only shapes the path: 3 and 4 agree for leaf 0)
                assert not merkle.verify_inclusion(index, size + 1, leaf, proof, ROOTS[size + 1])
            assert not merkle.verify_inclusion(index, size, leaf, proof + [root], root)
            if proof:
                assert not merkle.verify_inclusion(index, size, leaf, proof[:-1], root)


def test_every_consistency_proof_up_to_40_verifies():
    for new in range(N + 1):
        for old in range(new + 1):
            proof = merkle.consistency_proof(old, LEAVES[:new])
            ok = merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new], proof)
            assert ok, (old, new)
            if 0 < old < new:
                assert not merkle.verify_consistency(old, new, ROOTS[old - 1], ROOTS[new], proof)
                assert not merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new - 1], proof)
                assert not merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new], proof[:-1])
                extended = proof + [ROOTS[new]]
                assert not merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new], extended)


def test_a_flipped_bit_in_any_inclusion_proof_element_fails():
    for size in (2, 3, 7, 8, 13, 40):
        for index in range(size):
            proof = merkle.inclusion_proof(index, LEAVES[:size])
            leaf = merkle.leaf_hash(LEAVES[index])
            for element in range(len(proof)):
                for bit in (0, 77, 255):
                    bad = flipped(proof, element, bit)
                    assert not merkle.verify_inclusion(index, size, leaf, bad, ROOTS[size])


def test_a_flipped_bit_in_any_consistency_proof_element_fails():
    for new in (3, 8, 13, 40):
        for old in range(1, new):
            proof = merkle.consistency_proof(old, LEAVES[:new])
            for element in range(len(proof)):
                for bit in (0, 131, 255):
                    bad = flipped(proof, element, bit)
                    assert not merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new], bad)


def test_degenerate_and_malformed_input_is_refused_not_raised():
    root8 = bytes.fromhex(CT_ROOTS[8])
    leaf = merkle.leaf_hash(CT_LEAVES[5])
    proof = merkle.inclusion_proof(5, CT_LEAVES)
    assert not merkle.verify_inclusion(8, 8, leaf, proof, root8)
    assert not merkle.verify_inclusion(-1, 8, leaf, proof, root8)
    assert not merkle.verify_inclusion(5, 8, leaf[:31], proof, root8)
    assert not merkle.verify_inclusion(5, 8, leaf, [proof[0][:31], *proof[1:]], root8)
    assert not merkle.verify_inclusion(5, 8, leaf, "not a list", root8)
    assert merkle.verify_consistency(4, 4, ROOTS[4], ROOTS[4], [])
    assert not merkle.verify_consistency(4, 4, ROOTS[4], ROOTS[5], [])
    assert not merkle.verify_consistency(4, 4, ROOTS[4], ROOTS[4], [ROOTS[4]])
    assert merkle.verify_consistency(0, 8, merkle.EMPTY_ROOT, ROOTS[8], [])
    assert not merkle.verify_consistency(0, 8, ROOTS[1], ROOTS[8], [])
    assert not merkle.verify_consistency(8, 6, ROOTS[8], ROOTS[6], [])
    assert not merkle.verify_consistency(6, 8, ROOTS[6], ROOTS[8], [])
    with pytest.raises(ValueError):
        merkle.inclusion_proof(8, CT_LEAVES)
    with pytest.raises(ValueError):
        merkle.consistency_proof(9, CT_LEAVES)


def test_roots_at_many_sizes_in_one_pass_equal_the_root_of_each_prefix():
    data = [bytes([i]) * (i % 7 + 1) for i in range(130)]
    sizes = [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 127, 128, 129, 130, 131]
    roots = merkle.roots_at(iter(data), sizes)
    assert sorted(roots) == [s for s in sizes if s <= len(data)]  # 131 is past the log
    for size, found in roots.items():
        assert found == merkle.root(data[:size]), size
