package publisher_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/pkg/publisher"
)

func TestTLSConfig(t *testing.T) {
	t.Parallel()
	c, err := publisher.TLSConfig(publisher.TLSFiles{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.MinVersion != tls.VersionTLS12 || !c.InsecureSkipVerify || c.RootCAs != nil || len(c.Certificates) != 0 {
		t.Errorf("no files, insecure: got %+v, want TLS 1.2+, no verification, system roots, no client certificate", c)
	}

	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		files publisher.TLSFiles
		want  []string // in the error: the option, and the file at fault
	}{
		{publisher.TLSFiles{CA: missing}, []string{"tls_ca", missing}},
		{publisher.TLSFiles{CA: garbage}, []string{"tls_ca", "no PEM certificate", garbage}},
		{publisher.TLSFiles{Cert: missing, Key: garbage}, []string{"tls_cert/tls_key", missing}},
		{publisher.TLSFiles{Cert: garbage, Key: missing}, []string{"tls_cert/tls_key"}},
	} {
		_, err := publisher.TLSConfig(tc.files)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("TLSConfig(%+v): %v, want an error naming %s", tc.files, err, w)
			}
		}
	}
}
