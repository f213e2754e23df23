package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Dockerfile, for Docker users, describes the image this tool builds:
// its final stage states the same user, entrypoint, working directory,
// environment, port and labels, and writes the same /etc/passwd and
// /etc/group. (No Docker engine runs here, so the Dockerfile itself is
// never built by the tests; tools/image/run_test.go runs make image's.)
func TestDockerfileDescribesTheImage(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Instructions, with continuation lines joined.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var final []string
	var all []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		all = append(all, line)
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			final = nil
		}
		final = append(final, line)
	}
	instr := func(name string) []string {
		var args []string
		for _, l := range final {
			if k, v, _ := strings.Cut(l, " "); strings.EqualFold(k, name) {
				args = append(args, strings.TrimSpace(v))
			}
		}
		return args
	}
	if got := instr("FROM"); len(got) != 1 || got[0] != "scratch" {
		t.Errorf("final stage FROM %q, want scratch (no shell, nothing but what make image ships)", got)
	}
	if got := instr("USER"); !slices.Equal(got, []string{user}) {
		t.Errorf("USER %q, want %s", got, user)
	}
	if got := instr("ENTRYPOINT"); !slices.Equal(got, []string{`["/usr/local/bin/relay"]`}) {
		t.Errorf("ENTRYPOINT %q", got)
	}
	if got := instr("WORKDIR"); !slices.Equal(got, []string{home}) {
		t.Errorf("WORKDIR %q, want %s", got, home)
	}
	if got := instr("EXPOSE"); !slices.Equal(got, []string{"8080"}) {
		t.Errorf("EXPOSE %q, want 8080", got)
	}
	if got := strings.Fields(strings.Join(instr("ENV"), " ")); !slices.Equal(got, env) {
		t.Errorf("ENV %q, want %q", got, env)
	}
	labels := map[string]string{}
	pair := regexp.MustCompile(`([a-z.]+)="([^"]*)"`)
	for _, l := range instr("LABEL") {
		for _, m := range pair.FindAllStringSubmatch(l, -1) {
			labels[m[1]] = m[2]
		}
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     "${VERSION}",
		"org.opencontainers.image.revision":    "${COMMIT}",
	} {
		if labels[k] != want {
			t.Errorf("LABEL %s=%q, want %q", k, labels[k], want)
		}
	}
	if len(labels) != 5 {
		t.Errorf("LABEL has %d labels, want 5: %v", len(labels), labels)
	}
	// The build stage writes /etc/passwd and /etc/group as build() does.
	whole := strings.Join(all, "\n")
	for _, want := range []string{
		strings.ReplaceAll(passwd, "\n", `\n`),
		strings.ReplaceAll(group, "\n", `\n`),
		"ln -s /usr/local/bin/relay /out/app/relay",
		"ln -s /usr/local/bin/relay-cli /out/app/cli",
		"cp /etc/ssl/certs/ca-certificates.crt /out/root/etc/ssl/certs/",
		"chmod 1777 /out/root/tmp",
		"chmod 700 /out/home/nonroot",
		"mkdir -p /out/root/etc/ssl/certs /out/root/tmp /out/root/home /out/home/nonroot",
		"COPY --from=build --chown=65532:65532 /out/home/ /home/",
		`-ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}"`,
		"-trimpath",
		"ENV CGO_ENABLED=0",
	} {
		if !strings.Contains(whole, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
