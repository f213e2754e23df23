package publisher

import (
	"crypto/tls"

	"github.com/outbox-relay/relay/internal/tlsconfig"
)

// TLSFiles are a driver's tls_ca, tls_cert, tls_key and tls_insecure URL
// options. The builder is shared with the storage drivers, which take the
// same options.
type TLSFiles = tlsconfig.Files

// TLSConfig reads the files into a TLS 1.2+ client configuration. Its errors
// name the option whose file is at fault.
func TLSConfig(f TLSFiles) (*tls.Config, error) { return f.Config() }
