package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestConfigurationReferenceListsEverySetting keeps docs/configuration.md in
// step with the variables the relay reads.
func TestConfigurationReferenceListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range []any{config{}, openOutboxConfig{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			if name := typ.Field(i).Tag.Get("env"); name != "" {
				names = append(names, name)
			}
		}
	}
	for _, s := range ignoredOpenOutboxSettings {
		names = append(names, s.name)
	}
	for _, name := range names {
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("docs/configuration.md has no table row for %s", name)
		}
	}
}

// TestKubernetesExamplesUseRealSettings catches a misspelt variable in the
// shipped manifests, which would silently fall back to a default.
func TestKubernetesExamplesUseRealSettings(t *testing.T) {
	known := map[string]bool{}
	typ := reflect.TypeOf(config{})
	for i := range typ.NumField() {
		known[typ.Field(i).Tag.Get("env")] = true
	}
	for _, m := range kubernetesManifests(t) {
		pod := m.pod()
		if pod == nil {
			continue
		}
		for _, c := range pod.containers() {
			for _, e := range c.Env {
				if !known[e.Name] {
					t.Errorf("%s: container %s sets %s, which the relay does not read", m.file, c.Name, e.Name)
				}
			}
		}
	}
}

// TestKubernetesExamplesRunAsTheImagesUser keeps the manifests able to
// start: runAsNonRoot makes the kubelet refuse an image whose USER is a name
// ("image has non-numeric user"), so the Dockerfile names the user by number
// and every pod states that number, with fsGroup where it mounts files.
func TestKubernetesExamplesRunAsTheImagesUser(t *testing.T) {
	uid, gid := dockerfileUser(t, "../../Dockerfile")
	if uid == 0 {
		t.Fatalf("Dockerfile: USER is root; the manifests require runAsNonRoot")
	}
	pods := 0
	for _, m := range kubernetesManifests(t) {
		pod := m.pod()
		if pod == nil {
			continue
		}
		pods++
		sc := pod.SecurityContext
		if sc == nil {
			t.Errorf("%s: the pod has no securityContext", m.file)
			continue
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: runAsNonRoot is not true", m.file)
		}
		if sc.RunAsUser == nil || *sc.RunAsUser != uid {
			t.Errorf("%s: runAsUser is %v, want the image's user %d", m.file, deref(sc.RunAsUser), uid)
		}
		if sc.RunAsGroup == nil || *sc.RunAsGroup != gid {
			t.Errorf("%s: runAsGroup is %v, want the image's group %d", m.file, deref(sc.RunAsGroup), gid)
		}
		if sc.SeccompProfile.Type != "RuntimeDefault" {
			t.Errorf("%s: seccompProfile is %q, want RuntimeDefault (the restricted Pod Security Standard)", m.file, sc.SeccompProfile.Type)
		}
		mounts := false
		for _, c := range pod.containers() {
			mounts = mounts || len(c.VolumeMounts) > 0
			csc := c.SecurityContext
			if csc == nil {
				t.Errorf("%s: container %s has no securityContext", m.file, c.Name)
				continue
			}
			// A container's own value would override the pod's.
			if csc.RunAsUser != nil && *csc.RunAsUser != uid || csc.RunAsGroup != nil && *csc.RunAsGroup != gid ||
				csc.RunAsNonRoot != nil && !*csc.RunAsNonRoot {
				t.Errorf("%s: container %s overrides the pod's user", m.file, c.Name)
			}
			if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
				t.Errorf("%s: container %s does not set allowPrivilegeEscalation: false", m.file, c.Name)
			}
		}
		if mounts && (sc.FSGroup == nil || *sc.FSGroup != gid) {
			t.Errorf("%s: mounts files but fsGroup is %v, want %d", m.file, deref(sc.FSGroup), gid)
		}
	}
	if pods < 3 {
		t.Errorf("found %d pod templates, want the Deployment, the migrate Job and the prune CronJob", pods)
	}
}

// dockerfileUser reads the numeric uid:gid of the last USER instruction.
func dockerfileUser(t *testing.T, name string) (uid, gid int64) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var user string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.EqualFold(f[0], "USER") {
			user = f[1]
		}
	}
	u, g, ok := strings.Cut(user, ":")
	uid, uerr := strconv.ParseInt(u, 10, 64)
	gid, gerr := strconv.ParseInt(g, 10, 64)
	if !ok || uerr != nil || gerr != nil {
		t.Fatalf("%s: USER is %q, want numeric uid:gid (runAsNonRoot cannot check a name)", name, user)
	}
	return uid, gid
}

func deref(p *int64) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// manifest is what the tests read of a Kubernetes object: the pod template
// of a Deployment, Job or CronJob.
type manifest struct {
	file string
	Kind string `yaml:"kind"`
	Spec struct {
		Template    podTemplate `yaml:"template"`
		JobTemplate struct {
			Spec struct {
				Template podTemplate `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"`
	} `yaml:"spec"`
}

type podTemplate struct {
	Spec *podSpec `yaml:"spec"`
}

type podSpec struct {
	SecurityContext *struct {
		RunAsNonRoot   *bool  `yaml:"runAsNonRoot"`
		RunAsUser      *int64 `yaml:"runAsUser"`
		RunAsGroup     *int64 `yaml:"runAsGroup"`
		FSGroup        *int64 `yaml:"fsGroup"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	Containers     []container `yaml:"containers"`
	InitContainers []container `yaml:"initContainers"`
}

type container struct {
	Name string `yaml:"name"`
	Env  []struct {
		Name string `yaml:"name"`
	} `yaml:"env"`
	SecurityContext *struct {
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		RunAsGroup               *int64 `yaml:"runAsGroup"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

// pod returns the object's pod spec, or nil for objects without pods.
func (m manifest) pod() *podSpec {
	switch m.Kind {
	case "Deployment", "StatefulSet", "DaemonSet", "Job":
		return m.Spec.Template.Spec
	case "CronJob":
		return m.Spec.JobTemplate.Spec.Template.Spec
	}
	return nil
}

func (p *podSpec) containers() []container {
	return append(slices.Clone(p.InitContainers), p.Containers...)
}

// kubernetesManifests parses every object in deploy/kubernetes/*.yaml.
func kubernetesManifests(t *testing.T) []manifest {
	t.Helper()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests found: %v", err)
	}
	var out []manifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			m := manifest{file: filepath.Base(f)}
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if m.Kind == "" {
				t.Fatalf("%s: an object without a kind", f)
			}
			out = append(out, m)
		}
	}
	return out
}

// TestComposeScrapesExactlyTheStartedRelays keeps docker-compose's
// Prometheus from scraping relays whose profile is not started (their
// OutboxRelayDown would fire forever) while a started relay that goes down
// stays a target: every relay service depends on a target service of its own
// profile that copies the relay's file into the directory prometheus.yml's
// file_sd_configs reads, and nothing lists relays statically.
func TestComposeScrapesExactlyTheStartedRelays(t *testing.T) {
	type service struct {
		Environment map[string]string `yaml:"environment"`
		Profiles    []string          `yaml:"profiles"`
		DependsOn   any               `yaml:"depends_on"`
		Command     []string          `yaml:"command"`
		Volumes     []string          `yaml:"volumes"`
		VolumesFrom []string          `yaml:"volumes_from"`
	}
	var compose struct {
		Services map[string]service `yaml:"services"`
	}
	readYAML(t, "../../docker-compose.yml", &compose)
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []any  `yaml:"static_configs"`
			DNSSDConfigs  []any  `yaml:"dns_sd_configs"`
			FileSDConfigs []struct {
				Files []string `yaml:"files"`
			} `yaml:"file_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "../../deploy/prometheus/prometheus.yml", &prom)

	var dir string
	for _, sc := range prom.ScrapeConfigs {
		if sc.JobName != "outbox-relay" {
			continue
		}
		if len(sc.StaticConfigs) > 0 || len(sc.DNSSDConfigs) > 0 {
			t.Errorf("job outbox-relay lists relays statically or by DNS; it must read only the started relays' files")
		}
		if len(sc.FileSDConfigs) != 1 || len(sc.FileSDConfigs[0].Files) != 1 {
			t.Fatalf("job outbox-relay: want one file_sd_configs entry with one glob, got %+v", sc.FileSDConfigs)
		}
		dir = filepath.Dir(sc.FileSDConfigs[0].Files[0])
	}
	if dir == "" {
		t.Fatal("prometheus.yml has no job outbox-relay (alerts.yml and the dashboard expect that name)")
	}
	if !slices.Contains(compose.Services["prometheus"].Volumes, dir) {
		t.Errorf("the prometheus service does not hold %s as a volume of its own: %v", dir, compose.Services["prometheus"].Volumes)
	}

	relays := 0
	for name, svc := range compose.Services {
		if _, ok := svc.Environment["PUBLISHER_URL"]; !ok {
			continue
		}
		relays++
		target, ok := compose.Services[name+"-target"]
		if !ok {
			t.Errorf("relay service %s has no %s-target service to register it with Prometheus", name, name)
			continue
		}
		if !slices.Equal(target.Profiles, svc.Profiles) {
			t.Errorf("%s-target has profiles %v, %s has %v: want the same", name, target.Profiles, name, svc.Profiles)
		}
		deps, _ := svc.DependsOn.(map[string]any)
		if dep, _ := deps[name+"-target"].(map[string]any); dep["condition"] != "service_completed_successfully" {
			t.Errorf("%s does not depend on %s-target completing", name, name)
		}
		if !slices.Contains(target.VolumesFrom, "prometheus") {
			t.Errorf("%s-target does not write into the prometheus service's volume", name)
		}
		file := "deploy/prometheus/targets/" + name + ".yml"
		if !slices.ContainsFunc(target.Volumes, func(v string) bool { return strings.HasPrefix(v, "./"+file+":") }) {
			t.Errorf("%s-target does not mount %s", name, file)
		}
		if !strings.Contains(strings.Join(target.Command, " "), dir+"/"+name+".yml") {
			t.Errorf("%s-target's command %q does not write %s/%s.yml", name, target.Command, dir, name)
		}
		var groups []struct {
			Targets []string `yaml:"targets"`
		}
		readYAML(t, "../../"+file, &groups)
		if len(groups) != 1 || !slices.Equal(groups[0].Targets, []string{name + ":8080"}) {
			t.Errorf("%s lists %+v, want the one target %s:8080", file, groups, name)
		}
	}
	if relays < 3 {
		t.Errorf("found %d relay services in docker-compose.yml, want the NATS, Kafka and RabbitMQ relays", relays)
	}
}

func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestImageHasOpenOutboxsPaths: Open Outbox's CronJobs and compose files
// run /app/relay and /app/cli; the image links both to the binaries. (No
// image is built here: this checks the Dockerfile says so.)
func TestImageHasOpenOutboxsPaths(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ln -s /usr/local/bin/relay /out/app/relay",
		"ln -s /usr/local/bin/relay-cli /out/app/cli",
		"COPY --from=build /out/app /app\n",
		"COPY --from=build /out/relay /out/relay-cli /usr/local/bin/",
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
