package tlsconfig_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/tlsconfig"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	c, err := tlsconfig.Files{Insecure: true}.Config()
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
		files tlsconfig.Files
		want  []string // in the error: the option, and the file at fault
	}{
		{tlsconfig.Files{CA: missing}, []string{"tls_ca", missing}},
		{tlsconfig.Files{CA: garbage}, []string{"tls_ca", "no PEM certificate", garbage}},
		{tlsconfig.Files{Cert: missing, Key: garbage}, []string{"tls_cert/tls_key", missing}},
		{tlsconfig.Files{Cert: garbage, Key: missing}, []string{"tls_cert/tls_key"}},
		{tlsconfig.Files{Cert: garbage}, []string{"tls_cert and tls_key go together"}},
	} {
		_, err := tc.files.Config()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Config(%+v): %v, want an error naming %s", tc.files, err, w)
			}
		}
	}
}
