package publisher

import "github.com/outbox-relay/relay/internal/tlsconfig"

// TLSFiles are a driver's tls_ca, tls_cert, tls_key and tls_insecure URL
// options; TLSFiles.Config reads them into a TLS client configuration. The
// builder is shared with the storage drivers, which take the same options.
type TLSFiles = tlsconfig.Files
