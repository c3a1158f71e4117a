// A transparency-log client made of the Go checksum database's own packages
// (golang.org/x/mod/sumdb/note and tlog), none of Pathfinder's code: it follows the log that
// Pathfinder serves under <prefix> (c2sp.org/tlog-tiles) as any witness or monitor would.
//
//	tlog_client <prefix> <verifier key> <leaf index> [<old tree size>]
//
// It opens <prefix>/checkpoint with the pinned key, reads tiles through tlog's TileHashReader
// (which checks every tile against the signed root), proves the leaf's entry from its entry
// bundle into the root, and, given an old size, proves the old tree a prefix of the new one.
// It prints "OK <size> <root>" and exits 0, or names what failed and exits 1.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func fetch(url string) []byte {
	resp, err := http.Get(url)
	if err != nil {
		fail("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		fail("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return body
}

// tiles reads tlog-tiles paths: tile/<L>/<N>[.p/<W>], the Go path without its height.
type tiles struct{ prefix string }

func (t tiles) Height() int { return 8 }

func (t tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	data := make([][]byte, len(ts))
	for i, tile := range ts {
		path := strings.Replace(tile.Path(), "tile/8/", "tile/", 1)
		data[i] = fetch(t.prefix + "/" + path)
	}
	return data, nil
}

func (t tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func main() {
	if len(os.Args) < 4 {
		fail("usage: tlog_client <prefix> <verifier key> <leaf index> [<old tree size>]")
	}
	prefix, vkey := os.Args[1], os.Args[2]
	index, err := strconv.ParseInt(os.Args[3], 10, 64)
	if err != nil {
		fail("leaf index: %v", err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		fail("verifier key: %v", err)
	}
	n, err := note.Open(fetch(prefix+"/checkpoint"), note.VerifierList(verifier))
	if err != nil {
		fail("checkpoint: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 {
		fail("checkpoint body: %q", n.Text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size: %v", err)
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		fail("checkpoint root: %v", err)
	}
	var root tlog.Hash
	copy(root[:], raw)
	reader := tlog.TileHashReader(tlog.Tree{N: size, Hash: root}, tiles{prefix})

	// The leaf, from its entry bundle, proven into the signed root.
	bundle := tlog.TileForIndex(8, tlog.StoredHashIndex(0, index))
	bundle.L = -1
	path := strings.Replace(strings.Replace(bundle.Path(), "tile/8/data/", "tile/entries/", 1), "tile/8/", "tile/", 1)
	data := fetch(prefix + "/" + path)
	var leaf []byte
	for i, offset := int64(0), 0; offset < len(data); i++ {
		length := int(binary.BigEndian.Uint16(data[offset:]))
		if bundle.N*256+i == index {
			leaf = data[offset+2 : offset+2+length]
		}
		offset += 2 + length
	}
	if leaf == nil {
		fail("leaf %d is not in its entry bundle %s", index, path)
	}
	proof, err := tlog.ProveRecord(size, index, reader)
	if err != nil {
		fail("inclusion proof: %v", err)
	}
	if err := tlog.CheckRecord(proof, size, root, index, tlog.RecordHash(leaf)); err != nil {
		fail("leaf %d: %v", index, err)
	}
	if len(os.Args) > 4 {
		old, err := strconv.ParseInt(os.Args[4], 10, 64)
		if err != nil {
			fail("old size: %v", err)
		}
		oldRoot, err := tlog.TreeHash(old, reader)
		if err != nil {
			fail("old root: %v", err)
		}
		treeProof, err := tlog.ProveTree(size, old, reader)
		if err != nil {
			fail("consistency proof: %v", err)
		}
		if err := tlog.CheckTree(treeProof, size, root, old, oldRoot); err != nil {
			fail("consistency %d -> %d: %v", old, size, err)
		}
		fmt.Printf("old %d %s\n", old, base64.StdEncoding.EncodeToString(oldRoot[:]))
	}
	fmt.Printf("OK %d %s %s\n", size, lines[2], leaf)
}
