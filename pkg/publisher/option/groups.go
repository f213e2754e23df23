package option

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/outbox-relay/relay/internal/tlsconfig"
)

// TLS is the tls_ca, tls_cert, tls_key and (where a driver takes it)
// tls_insecure group: the one place their values are read and checked.
type TLS struct {
	ca, cert, key *String
	insecure      *Bool // nil when the driver does not take tls_insecure
}

// TLSDocs are a driver's words for its TLS options: what is verified
// differs (a server, an endpoint) and so does what turns TLS on.
type TLSDocs struct {
	// CA documents tls_ca.
	CA string
	// CertKey documents tls_cert and tls_key together; empty says what
	// every driver says, CertKeyDoc.
	CertKey string
	// Insecure documents tls_insecure; empty leaves the option out.
	Insecure string
}

// CertKeyDoc is what tls_cert and tls_key mean unless a driver says more.
const CertKeyDoc = "Client certificate and key for mutual TLS (both or neither)."

// TLS declares the TLS options. A client certificate without its key (or
// the reverse) is an error of the URL, found before any file is read.
func (s *Set) TLS(docs TLSDocs) *TLS {
	if docs.CertKey == "" {
		docs.CertKey = CertKeyDoc
	}
	t := &TLS{
		ca:   s.String("tls_ca", "", docs.CA),
		cert: s.String("tls_cert", "", docs.CertKey),
		key:  s.String("tls_key", "", docs.CertKey).JoinRow(),
	}
	if docs.Insecure != "" {
		t.insecure = s.Bool("tls_insecure", false, docs.Insecure)
	}
	s.Rule(func(v Values) error { return t.Get(v).Validate() })
	return t
}

// Get returns the files the URL names.
func (t *TLS) Get(v Values) tlsconfig.Files {
	f := tlsconfig.Files{CA: t.ca.Get(v), Cert: t.cert.Get(v), Key: t.key.Get(v)}
	if t.insecure != nil {
		f.Insecure = t.insecure.Get(v)
	}
	return f
}

// Secret is a pair of options that name where a secret is read from, never
// the secret itself: <name>_file (a file) and <name>_env (a variable of
// the program's environment). A secret in a URL would reach every log line
// that shows the URL.
type Secret struct {
	file, env *String
}

// SecretSource declares name_file and name_env for the secret that what
// describes ("signing secret"). Each needs a value when given, and the two
// exclude each other.
func (s *Set) SecretSource(name, what, fileDoc, envDoc string) *Secret {
	x := &Secret{file: s.String(name+"_file", "", fileDoc), env: s.String(name+"_env", "", envDoc)}
	s.Rule(func(v Values) error {
		file, hasFile := x.file.Lookup(v)
		env, hasEnv := x.env.Lookup(v)
		switch {
		case hasFile && file == "", hasEnv && env == "":
			return fmt.Errorf("%s and %s need a value (a path, a variable name)", x.file.Name(), x.env.Name())
		case file != "" && env != "":
			return fmt.Errorf("%s and %s both name the %s; keep one", x.file.Name(), x.env.Name(), what)
		}
		return nil
	})
	return x
}

// Get returns where the URL says the secret is.
func (x *Secret) Get(v Values) SecretRef {
	return SecretRef{File: x.file.Get(v), Env: x.env.Get(v), fileOpt: x.file.Name(), envOpt: x.env.Name()}
}

// SecretRef says where a secret is: a file or an environment variable.
type SecretRef struct {
	File, Env string
	// The option names, for errors; secret_file and secret_env unless
	// declared otherwise.
	fileOpt, envOpt string
}

// IsZero reports whether the URL names no source.
func (r SecretRef) IsZero() bool { return r.File == "" && r.Env == "" }

// Read returns the secret's text and a description of where it came from
// ("secret_file /run/secrets/x"), for errors that must not quote the
// secret. lookupEnv reads the environment the program hands the drivers;
// drivers never read the process's own.
func (r SecretRef) Read(lookupEnv func(name string) (string, bool, error)) (text, source string, err error) {
	fileOpt, envOpt := r.fileOpt, r.envOpt
	if fileOpt == "" {
		fileOpt, envOpt = "secret_file", "secret_env"
	}
	switch {
	case r.File != "":
		b, err := os.ReadFile(r.File)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", fileOpt, err)
		}
		return string(b), fileOpt + " " + r.File, nil
	case r.Env != "":
		v, ok, err := lookupEnv(r.Env)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", envOpt, err)
		}
		if !ok || strings.TrimSpace(v) == "" {
			return "", "", fmt.Errorf("%s: %s is not set or empty", envOpt, r.Env)
		}
		return v, envOpt + " " + r.Env, nil
	}
	return "", "", errors.New("no secret source: name a file or an environment variable")
}
