package main

import (
	"os"
	"reflect"
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
	typ := reflect.TypeOf(config{})
	for i := range typ.NumField() {
		name := typ.Field(i).Tag.Get("env")
		if name == "" {
			continue
		}
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("docs/configuration.md has no table row for %s", name)
		}
	}
}
