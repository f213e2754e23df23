package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
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
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests found: %v", err)
	}
	envName := regexp.MustCompile(`(?:- name|\{name): ([A-Z][A-Z0-9_]+)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range envName.FindAllStringSubmatch(string(b), -1) {
			if !known[m[1]] {
				t.Errorf("%s sets %s, which the relay does not read", filepath.Base(f), m[1])
			}
		}
	}
}
