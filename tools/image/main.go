// Command image assembles Outbox Relay's OCI image from the static linux
// binaries that `make image` builds (the same build as `make release`), and
// writes it as an OCI archive (an oci-layout in a tarball) that
// `podman load` and `skopeo copy oci-archive:…` read. It needs no Docker
// engine, no registry and no base image.
//
// The image is the one the Dockerfile describes: /usr/local/bin/relay and
// /usr/local/bin/relay-cli, Open Outbox Relay's /app/relay and /app/cli as
// symbolic links to them, the numeric user 65532:65532 (named nonroot in
// /etc/passwd and /etc/group), the CA certificates, no shell, and the relay
// as entrypoint. Every file has a fixed owner, mode and mtime (-created,
// the commit's time), so that two builds of one commit have the same digest.
//
// Usage (from tools/image):
//
//	go run . -relay ../../dist/image/relay -cli ../../dist/image/relay-cli \
//	  -version v1.2.3 -revision 0123456789ab -created 1700000000 \
//	  -out ../../dist/outbox-relay_1.2.3_linux_amd64.oci.tar
package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's user, distroless's nonroot: numeric, so that Kubernetes can
// check runAsNonRoot against it.
const (
	uid  = 65532
	gid  = 65532
	user = "65532:65532"
	home = "/home/nonroot"
)

// /etc/passwd and /etc/group: root, and 65532 as nonroot (distroless's
// names), so that tools show the user. Neither has a login shell.
var (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", uid, gid, home)
	group = "root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", gid)
)

// CA certificates land where Go (and OpenSSL on Debian) look first.
const caPath = "/etc/ssl/certs/ca-certificates.crt"

// Labels shared with the Dockerfile; version and revision come from flags.
const (
	title       = "outbox-relay"
	description = "Transactional outbox relay: PostgreSQL or MySQL to NATS JetStream, Kafka or RabbitMQ"
	source      = "https://github.com/outbox-relay/relay"
)

// The environment distroless's static image sets, which the Dockerfile's
// image inherits.
var env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=" + caPath,
}

func main() {
	var o options
	flag.StringVar(&o.relay, "relay", "", "the static linux relay binary")
	flag.StringVar(&o.cli, "cli", "", "the static linux relay-cli binary")
	flag.StringVar(&o.arch, "arch", "amd64", "the binaries' GOARCH, the image's architecture")
	flag.StringVar(&o.version, "version", "dev", "org.opencontainers.image.version")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision (the commit)")
	flag.Int64Var(&o.created, "created", 0, "the image's creation time and every file's mtime, in Unix seconds (the commit's time)")
	flag.StringVar(&o.ca, "ca", "", "a PEM bundle of CA certificates to ship; empty: the NSS roots of golang.org/x/crypto/x509roots/fallback at go.mod's version")
	flag.StringVar(&o.ref, "ref", "", "the archive's org.opencontainers.image.ref.name (default: localhost/outbox-relay:<version>)")
	flag.StringVar(&o.out, "out", "", "the OCI archive to write")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

type options struct {
	relay, cli, arch       string
	version, revision, ref string
	ca, out                string
	created                int64
}

func run(o options) error {
	if o.relay == "" || o.cli == "" || o.out == "" {
		return errors.New("-relay, -cli and -out are required")
	}
	if o.ref == "" {
		o.ref = "localhost/outbox-relay:" + tag(o.version)
	}
	relay, err := os.ReadFile(o.relay)
	if err != nil {
		return err
	}
	cli, err := os.ReadFile(o.cli)
	if err != nil {
		return err
	}
	var ca []byte
	if o.ca != "" {
		if ca, err = os.ReadFile(o.ca); err != nil {
			return err
		}
	} else if ca, err = nssRoots(); err != nil {
		return err
	}
	img, err := build(o, relay, cli, ca)
	if err != nil {
		return err
	}
	return writeArchive(o.out, img, o.ref)
}

// tag makes a version usable as an image tag: [A-Za-z0-9_.-], at most 128
// characters (git describe's "+dirty" and the like become "-").
func tag(version string) string {
	t := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		}
		return '-'
	}, strings.TrimPrefix(version, "v"))
	if t == "" || t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

// nssRoots is the PEM bundle of the module's NSS roots. Roots with a
// constraint (NSS's distrust-after date) cannot carry it in a PEM file, so
// they are left out rather than trusted without it.
func nssRoots() ([]byte, error) {
	var b bytes.Buffer
	n := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		c, err := x509.ParseCertificate(r.Certificate)
		if err != nil {
			return nil, fmt.Errorf("a root of x509roots/fallback: %w", err)
		}
		fmt.Fprintf(&b, "# %s\n", c.Subject)
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("x509roots/fallback has no unconstrained root")
	}
	return b.Bytes(), nil
}

// entry is one file, directory or symbolic link of a layer.
type entry struct {
	name  string // without the leading slash
	mode  int64
	uid   int
	gid   int
	data  []byte
	link  string // a symbolic link's target
	isDir bool
}

func dir(name string, mode int64) entry { return entry{name: name, mode: mode, isDir: true} }
func file(name string, mode int64, data []byte) entry {
	return entry{name: name, mode: mode, data: data}
}
func symlink(name, target string) entry { return entry{name: name, mode: 0o777, link: target} }

// layerTar is a tar of the entries, with every mtime at created and no
// user or group names: its bytes depend on the entries alone.
func layerTar(entries []entry, created time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: created,
			Format:  tar.FormatUSTAR,
		}
		switch {
		case e.isDir:
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		case e.link != "":
			h.Typeflag = tar.TypeSymlink
			h.Linkname = e.link
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func layer(entries []entry, created time.Time) (v1.Layer, error) {
	raw, err := layerTar(entries, created)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// build assembles the image: a base layer (users, CA certificates, /tmp,
// the home directory) that changes only with the certificates, and a layer
// of the binaries.
func build(o options, relay, cli, ca []byte) (v1.Image, error) {
	created := time.Unix(o.created, 0).UTC()
	homeDir := dir(strings.TrimPrefix(home, "/"), 0o700)
	homeDir.uid, homeDir.gid = uid, gid
	base := []entry{
		dir("etc", 0o755),
		file("etc/group", 0o644, []byte(group)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("etc/ssl", 0o755),
		dir("etc/ssl/certs", 0o755),
		file(strings.TrimPrefix(caPath, "/"), 0o644, ca),
		dir("home", 0o755),
		homeDir,
		dir("tmp", 0o1777),
	}
	bins := []entry{
		dir("app", 0o755),
		symlink("app/cli", "/usr/local/bin/relay-cli"),
		symlink("app/relay", "/usr/local/bin/relay"),
		dir("usr", 0o755),
		dir("usr/local", 0o755),
		dir("usr/local/bin", 0o755),
		file("usr/local/bin/relay", 0o755, relay),
		file("usr/local/bin/relay-cli", 0o755, cli),
	}
	for _, l := range [][]entry{base, bins} {
		if !slices.IsSortedFunc(l, func(a, b entry) int { return strings.Compare(a.name, b.name) }) {
			return nil, errors.New("layer entries out of order")
		}
		for _, e := range l {
			if d := path.Dir(e.name); d != "." && !slices.ContainsFunc(l, func(p entry) bool { return p.isDir && p.name == d }) {
				return nil, fmt.Errorf("%s: no entry for its directory %s", e.name, d)
			}
		}
	}
	baseLayer, err := layer(base, created)
	if err != nil {
		return nil, err
	}
	binLayer, err := layer(bins, created)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: baseLayer, History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "tools/image: /etc/passwd, /etc/group, CA certificates, /tmp, " + home,
		}},
		mutate.Addendum{Layer: binLayer, History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "tools/image: /usr/local/bin/relay, /usr/local/bin/relay-cli, /app/relay, /app/cli",
		}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = o.arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		User:         user,
		Env:          env,
		Entrypoint:   []string{"/usr/local/bin/relay"},
		WorkingDir:   home,
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       title,
			"org.opencontainers.image.description": description,
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.revision":    o.revision,
			"org.opencontainers.image.source":      source,
		},
	}
	return mutate.ConfigFile(img, cf)
}

// writeArchive writes the image as an oci-layout tarball: oci-layout,
// index.json naming the image ref, and the blobs, in a fixed order with
// fixed times.
func writeArchive(out string, img v1.Image, ref string) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add: img,
		Descriptor: v1.Descriptor{
			MediaType:   types.OCIManifestSchema1,
			Annotations: map[string]string{"org.opencontainers.image.ref.name": ref},
			Platform:    &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		},
	})
	index, err := idx.RawManifest()
	if err != nil {
		return err
	}
	blobs := map[string][]byte{
		digest.Hex:     manifest,
		configName.Hex: config,
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		blobs[d.Hex] = b
	}
	mtime := cf.Created.Time
	entries := []entry{
		dir("blobs", 0o755),
		dir("blobs/sha256", 0o755),
	}
	for _, h := range slices.Sorted(maps.Keys(blobs)) {
		entries = append(entries, file("blobs/sha256/"+h, 0o644, blobs[h]))
	}
	entries = append(entries,
		file("index.json", 0o644, index),
		file("oci-layout", 0o644, []byte(`{"imageLayoutVersion":"1.0.0"}`)),
	)
	raw, err := layerTar(entries, mtime)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", out, digest, ref)
	return nil
}
