// Checks this project's checkpoints and proofs with Go's reference implementation of the
// signed-note format (golang.org/x/mod/sumdb/note) and of RFC 6962 proofs
// (golang.org/x/mod/sumdb/tlog). Reads one JSON object on standard input; prints what it
// verified, or exits non-zero with why not.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type input struct {
	PublicKey        string   `json:"public_key"`
	WitnessKey       string   `json:"witness_key"`
	Checkpoint       string   `json:"checkpoint"`
	LeafIndex        int64    `json:"leaf_index"`
	LeafHash         string   `json:"leaf_hash"`
	InclusionProof   []string `json:"inclusion_proof"`
	OldCheckpoint    string   `json:"old_checkpoint"`
	ConsistencyProof []string `json:"consistency_proof"`
}

type tree struct {
	origin string
	size   int64
	root   tlog.Hash
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func hash(s string) tlog.Hash {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != tlog.HashSize {
		fail("not a base64 hash: %q", s)
	}
	var h tlog.Hash
	copy(h[:], b)
	return h
}

// open verifies a checkpoint note and parses its C2SP tlog-checkpoint body.
func open(msg string, verifiers note.Verifiers) (tree, *note.Note) {
	n, err := note.Open([]byte(msg), verifiers)
	if err != nil {
		fail("note.Open: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if len(lines) < 3 {
		fail("a checkpoint body has at least three lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("size: %v", err)
	}
	return tree{lines[0], size, hash(lines[2])}, n
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("input: %v", err)
	}
	log, err := note.NewVerifier(in.PublicKey)
	if err != nil {
		fail("public key: %v", err)
	}
	keys := []note.Verifier{log}
	if in.WitnessKey != "" {
		w, err := note.NewVerifier(in.WitnessKey)
		if err != nil {
			fail("witness key: %v", err)
		}
		keys = append(keys, w)
	}
	verifiers := note.VerifierList(keys...)
	t, n := open(in.Checkpoint, verifiers)
	names := []string{}
	for _, s := range n.Sigs {
		names = append(names, s.Name)
	}
	fmt.Printf("checkpoint %s size %d signed by %s\n", t.origin, t.size, strings.Join(names, ","))
	if in.LeafHash != "" {
		proof := tlog.RecordProof{}
		for _, p := range in.InclusionProof {
			proof = append(proof, hash(p))
		}
		if err := tlog.CheckRecord(proof, t.size, t.root, in.LeafIndex, hash(in.LeafHash)); err != nil {
			fail("tlog.CheckRecord: %v", err)
		}
		fmt.Printf("leaf %d is in the tree of %d\n", in.LeafIndex, t.size)
	}
	if in.OldCheckpoint != "" {
		old, _ := open(in.OldCheckpoint, verifiers)
		proof := tlog.TreeProof{}
		for _, p := range in.ConsistencyProof {
			proof = append(proof, hash(p))
		}
		if err := tlog.CheckTree(proof, t.size, t.root, old.size, old.root); err != nil {
			fail("tlog.CheckTree: %v", err)
		}
		fmt.Printf("the tree of %d is a prefix of the tree of %d\n", old.size, t.size)
	}
}
