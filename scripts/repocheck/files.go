package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// maxFileSize is the largest file the repository may track: a clone
// downloads every version of every file for good.
const maxFileSize = 1 << 20

// checkFiles reports tracked files over maxFileSize and tracked executables
// and archives: build outputs belong in bin/ or a temporary directory.
func checkFiles(dir string) ([]string, error) {
	paths, err := trackedFiles(dir)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, p := range paths {
		info, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, a symlink or a submodule
		}
		if info.Size() > maxFileSize {
			problems = append(problems, fmt.Sprintf("%s is %s, over the 1 MiB limit for a tracked file.", p, sizeText(info.Size())))
		}
		kind, err := binaryKind(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		if kind != "" {
			problems = append(problems, fmt.Sprintf("%s is %s and must not be tracked (build outputs go to bin/ or a temporary directory).", p, kind))
		}
	}
	return problems, nil
}

// trackedFiles lists the files git tracks in dir (the index, so a file
// staged for the next commit counts).
func trackedFiles(dir string) ([]string, error) {
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", gitError(err))
	}
	var paths []string
	for _, p := range strings.Split(string(out), "\x00") {
		if p != "" {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

func gitError(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

func sizeText(n int64) string {
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}

// binaryKind names what the file at path is when its first bytes are the
// magic of an executable or an object archive, and returns "" otherwise.
// It reads the bytes rather than asking file(1), which a machine may lack.
func binaryKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", err
	}
	return magicKind(head[:n]), nil
}

// magicKind is binaryKind on the file's first bytes.
func magicKind(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x7fELF")):
		return "an ELF executable or object"
	case bytes.HasPrefix(b, []byte("!<arch>\n")):
		return "an ar archive (a static library or object archive)"
	case bytes.HasPrefix(b, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "a Mach-O universal binary or a Java class file"
	case len(b) >= 4 && isMachO(binary.BigEndian.Uint32(b)):
		return "a Mach-O executable or object"
	case isPE(b):
		return "a PE (Windows) executable"
	}
	return ""
}

// isMachO reports whether the first four bytes, read big-endian, are a
// Mach-O magic of either byte order, 32 or 64 bits.
func isMachO(magic uint32) bool {
	switch magic {
	case 0xfeedface, 0xfeedfacf, 0xcefaedfe, 0xcffaedfe:
		return true
	}
	return false
}

// isPE reports whether b starts with a DOS header ("MZ") whose e_lfanew
// points at a PE signature: "MZ" alone starts some text files.
func isPE(b []byte) bool {
	if len(b) < 0x40 || !bytes.HasPrefix(b, []byte("MZ")) {
		return false
	}
	off := int(binary.LittleEndian.Uint32(b[0x3c:]))
	return off >= 0x40 && off+4 <= len(b) && bytes.Equal(b[off:off+4], []byte("PE\x00\x00"))
}
