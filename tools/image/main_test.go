package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// standIns writes two small files standing in for the binaries, so that
// the image's own tests need no build of the relay.
func standIns(t *testing.T) (relay, cli string) {
	t.Helper()
	dir := t.TempDir()
	relay, cli = filepath.Join(dir, "relay"), filepath.Join(dir, "relay-cli")
	if err := os.WriteFile(relay, []byte("stand-in relay\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cli, []byte("stand-in relay-cli\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return relay, cli
}

func buildArchive(t *testing.T, created int64) string {
	t.Helper()
	relay, cli := standIns(t)
	out := filepath.Join(t.TempDir(), "image.oci.tar")
	err := run(options{relay: relay, cli: cli, arch: "amd64", version: "v1.2.3", revision: "0123456789ab",
		created: created, out: out})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// archiveImage is what an archive holds: its one image and the image's
// ref name.
type archiveImage struct {
	img    v1.Image
	ref    string
	config *v1.ConfigFile
	files  map[string]*tar.Header
	data   map[string][]byte
}

// readArchive unpacks an OCI archive the way a runtime would read it: the
// layout through go-containerregistry, the filesystem by flattening the
// layers.
func readArchive(t *testing.T, archive string) archiveImage {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves the layout", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %q of type %c", h.Name, h.Typeflag)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	a := archiveImage{img: img, ref: d.Annotations["org.opencontainers.image.ref.name"], config: cfg,
		files: map[string]*tar.Header{}, data: map[string][]byte{}}
	rc := mutate.Extract(img)
	defer rc.Close()
	fr := tar.NewReader(rc)
	for {
		h, err := fr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		a.files[name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(fr)
			if err != nil {
				t.Fatal(err)
			}
			a.data[name] = b
		}
	}
	return a
}

// checkImage checks what the Dockerfile describes too: paths, user,
// entrypoint, labels, CA certificates, and no shell.
func checkImage(t *testing.T, a archiveImage, version, revision string) {
	t.Helper()
	c := a.config.Config
	if c.User != "65532:65532" {
		t.Errorf("User = %q, want 65532:65532", c.User)
	}
	if strings.Join(c.Entrypoint, " ") != "/usr/local/bin/relay" || len(c.Cmd) != 0 {
		t.Errorf("Entrypoint %q Cmd %q, want [/usr/local/bin/relay] and none", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("ExposedPorts %v lack 8080/tcp", c.ExposedPorts)
	}
	if a.config.OS != "linux" {
		t.Errorf("OS = %q", a.config.OS)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "outbox-relay",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
		"org.opencontainers.image.source":      "https://github.com/outbox-relay/relay",
		"org.opencontainers.image.description": description,
	}
	for k, want := range labels {
		if got := c.Labels[k]; got != want || want == "" {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	type want struct {
		typ      byte
		mode     int64
		uid, gid int
		link     string
	}
	wants := map[string]want{
		"usr/local/bin/relay":               {tar.TypeReg, 0o755, 0, 0, ""},
		"usr/local/bin/relay-cli":           {tar.TypeReg, 0o755, 0, 0, ""},
		"app/relay":                         {tar.TypeSymlink, 0o777, 0, 0, "/usr/local/bin/relay"},
		"app/cli":                           {tar.TypeSymlink, 0o777, 0, 0, "/usr/local/bin/relay-cli"},
		"etc/passwd":                        {tar.TypeReg, 0o644, 0, 0, ""},
		"etc/group":                         {tar.TypeReg, 0o644, 0, 0, ""},
		"etc/ssl/certs/ca-certificates.crt": {tar.TypeReg, 0o644, 0, 0, ""},
		"home/nonroot":                      {tar.TypeDir, 0o700, 65532, 65532, ""},
		"tmp":                               {tar.TypeDir, 0o1777, 0, 0, ""},
	}
	for name, w := range wants {
		h, ok := a.files[name]
		if !ok {
			t.Errorf("/%s missing", name)
			continue
		}
		if h.Typeflag != w.typ || h.Mode&0o7777 != w.mode || h.Uid != w.uid || h.Gid != w.gid || h.Linkname != w.link {
			t.Errorf("/%s: type %c mode %o owner %d:%d link %q; want %c %o %d:%d %q",
				name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Linkname, w.typ, w.mode, w.uid, w.gid, w.link)
		}
	}
	for _, sh := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"} {
		if _, ok := a.files[sh]; ok {
			t.Errorf("/%s exists: the image must have no shell", sh)
		}
	}
	for name, h := range a.files {
		if h.Typeflag == tar.TypeReg && h.Mode&0o6000 != 0 {
			t.Errorf("/%s is setuid or setgid", name)
		}
		if (h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeDir) && h.Mode&0o002 != 0 && name != "tmp" {
			t.Errorf("/%s is world-writable", name)
		}
	}
	if !strings.Contains(string(a.data["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", a.data["etc/passwd"])
	}
	if !strings.Contains(string(a.data["etc/group"]), "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532:\n%s", a.data["etc/group"])
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(a.data["etc/ssl/certs/ca-certificates.crt"]) {
		t.Error("/etc/ssl/certs/ca-certificates.crt holds no certificate")
	} else if n := bytes.Count(a.data["etc/ssl/certs/ca-certificates.crt"], []byte("BEGIN CERTIFICATE")); n < 50 {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt holds %d certificates, want the whole set", n)
	}
}

func TestImage(t *testing.T) {
	a := readArchive(t, buildArchive(t, 1700000000))
	checkImage(t, a, "v1.2.3", "0123456789ab")
	if a.ref != "localhost/outbox-relay:1.2.3" {
		t.Errorf("ref name %q", a.ref)
	}
	if string(a.data["usr/local/bin/relay"]) != "stand-in relay\n" || string(a.data["usr/local/bin/relay-cli"]) != "stand-in relay-cli\n" {
		t.Error("the binaries are not the files given")
	}
	for name, h := range a.files {
		if h.ModTime.Unix() != 1700000000 {
			t.Errorf("/%s mtime %v, want -created", name, h.ModTime)
		}
	}
	if got := a.config.Created.Unix(); got != 1700000000 {
		t.Errorf("created %d", got)
	}
}

// Two builds of the same inputs are the same bytes, so the same digest;
// another creation time (another commit) gives another.
func TestReproducible(t *testing.T) {
	relay, cli := standIns(t)
	dir := t.TempDir()
	build := func(name string, created int64) []byte {
		out := filepath.Join(dir, name)
		if err := run(options{relay: relay, cli: cli, arch: "arm64", version: "v1", revision: "abc",
			created: created, out: out}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := build("a", 1), build("b", 1), build("c", 2)
	if !bytes.Equal(a, b) {
		t.Error("two builds of the same inputs differ")
	}
	if bytes.Equal(a, c) {
		t.Error("builds with another -created are the same")
	}
}

func TestTag(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":              "1.2.3",
		"8130ae3-dirty":       "8130ae3-dirty",
		"v1.2.3-4-gabc+dirty": "1.2.3-4-gabc-dirty",
		"":                    "v",
		"-x":                  "v-x",
	} {
		if got := tag(in); got != want {
			t.Errorf("tag(%q) = %q, want %q", in, got, want)
		}
	}
}

// The archive `make image` built, when make test-image names it.
func TestBuiltArchive(t *testing.T) {
	archive := os.Getenv("IMAGE_ARCHIVE")
	if archive == "" {
		t.Skip("IMAGE_ARCHIVE is not set: make test-image builds the image and checks it")
	}
	a := readArchive(t, archive)
	lv := a.config.Config.Labels["org.opencontainers.image.version"]
	checkImage(t, a, lv, a.config.Config.Labels["org.opencontainers.image.revision"])
	if lv == "" {
		t.Error("no version label")
	}
	var m struct {
		Layers []json.RawMessage `json:"layers"`
	}
	raw, err := a.img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil || len(m.Layers) != 2 {
		t.Errorf("manifest: %d layers (%v), want 2", len(m.Layers), err)
	}
}
