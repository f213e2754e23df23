package publisher

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles are a driver's tls_ca, tls_cert, tls_key and tls_insecure URL
// options.
type TLSFiles struct {
	// CA verifies the server instead of the system's roots.
	CA string
	// Cert and Key are a client certificate for mutual TLS; both or neither.
	Cert, Key string
	// Insecure skips verifying the server's certificate.
	Insecure bool
}

// Validate reports an incomplete client certificate.
func (f TLSFiles) Validate() error {
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("tls_cert and tls_key go together")
	}
	return nil
}

// TLSConfig reads the files into a TLS 1.2+ client configuration. Its errors
// name the option whose file is at fault.
func TLSConfig(f TLSFiles) (*tls.Config, error) {
	// InsecureSkipVerify only when tls_insecure=true asks for it.
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.Insecure} //nolint:gosec // only on request
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca: no PEM certificate in %s", f.CA)
		}
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls_cert/tls_key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
