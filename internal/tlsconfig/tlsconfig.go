// Package tlsconfig builds TLS client configurations from the tls_ca,
// tls_cert, tls_key and tls_insecure options of the relay's URLs. Broker
// and database drivers both take these options; the builder lives here,
// below both, so that neither side links the other's client to share it.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files are the tls_ca, tls_cert, tls_key and tls_insecure options.
type Files struct {
	// CA verifies the server instead of the system's roots.
	CA string
	// Cert and Key are a client certificate for mutual TLS; both or neither.
	Cert, Key string
	// Insecure skips verifying the server's certificate.
	Insecure bool
}

// IsZero reports whether no option is set.
func (f Files) IsZero() bool { return f == Files{} }

// Validate reports an incomplete client certificate. It reads no file, so
// a URL can be checked where the files are not.
func (f Files) Validate() error {
	if (f.Cert == "") != (f.Key == "") {
		return errors.New("tls_cert and tls_key go together")
	}
	return nil
}

// Config reads the files into a TLS 1.2+ client configuration. Its errors
// name the option whose file is at fault.
func (f Files) Config() (*tls.Config, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
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
