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
	names = append(names, ignoredOpenOutboxSettings...)
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
