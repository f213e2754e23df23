// Package buildinfo says which build of the relay and relay-cli is
// running: the version the build stamped (make build and the image stamp
// `git describe --tags`; a plain `go build` leaves "dev") and the commit,
// stamped too or read from what Go records of the checkout it built.
package buildinfo

import "runtime/debug"

// Describe returns version with the commit it was built from, as
// "v0.1.0 (commit 1a2b3c4d5e6f)"; commit is what the build stamped, empty
// to ask Go's build information, and left out when neither knows it.
func Describe(version, commit string) string {
	if commit == "" {
		commit = vcsRevision()
	}
	if commit == "" {
		return version
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	return version + " (commit " + commit + ")"
}

// vcsRevision is the commit `go build` recorded (vcs.revision, with a
// "-dirty" mark for uncommitted changes), or "".
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return rev + dirty
}
