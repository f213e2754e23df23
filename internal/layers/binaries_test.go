package layers

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// executableMagic are the first bytes of the compiled programs Go builds
// here and elsewhere (ELF, Mach-O 64-bit both byte orders, PE).
var executableMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xcf, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf},
	[]byte("MZ"),
}

// TestNoBinaryIsTracked keeps build output out of the repository: a binary
// committed by mistake bloats every clone for good.
func TestNoBinaryIsTracked(t *testing.T) {
	t.Parallel()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		head := make([]byte, 4)
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			continue // deleted in the work tree, or a submodule
		}
		n, _ := f.Read(head)
		f.Close()
		for _, magic := range executableMagic {
			if n >= len(magic) && bytes.Equal(head[:len(magic)], magic) {
				t.Errorf("%s is a compiled binary; remove it with git rm --cached and let .gitignore catch it", name)
			}
		}
	}
}
