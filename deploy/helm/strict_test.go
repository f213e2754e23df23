package helm

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// apiTypes are the Kubernetes API types of the kinds the chart makes, by
// apiVersion and kind; a manifest of any other is refused.
var apiTypes = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"batch/v1/CronJob":                        func() any { return &batchv1.CronJob{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"networking.k8s.io/v1/Ingress":            func() any { return &networkingv1.Ingress{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
}

// decodeStrict decodes every manifest of files into its API type, refusing
// unknown and duplicate fields.
func decodeStrict(files map[string]string) error {
	for _, doc := range documents(files) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return err
		}
		newType, ok := apiTypes[head.APIVersion+"/"+head.Kind]
		if !ok {
			return fmt.Errorf("%s %s: no API type known to the test", head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), newType()); err != nil {
			return fmt.Errorf("%s: %w\n%s", head.Kind, err, doc)
		}
	}
	return nil
}

// variants are values that between them turn on every part of the chart.
func variants() map[string]map[string]any {
	everything := defaults()
	everything["secrets"].(map[string]any)["consolePassword"] = "console-Pa55word"
	everything["secrets"].(map[string]any)["env"] = map[string]any{"WAL_STORAGE_URL": "postgres://relay:x@db-primary/app"}
	everything["console"] = map[string]any{"enabled": true, "ingress": map[string]any{"enabled": true, "host": "outbox.example.com",
		"tls": []any{map[string]any{"secretName": "console-tls", "hosts": []any{"outbox.example.com"}}}}}
	everything["networkPolicy"] = map[string]any{"enabled": true,
		"metricsFrom": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}},
		"database":    map[string]any{"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.12.0/24"}}}},
		"extraEgress": []any{map[string]any{"ports": []any{map[string]any{"port": 4318, "protocol": "TCP"}}}}}
	everything["serviceMonitor"] = map[string]any{"enabled": true}
	everything["prometheusRule"] = map[string]any{"enabled": true}
	everything["grafanaDashboard"] = map[string]any{"enabled": true}
	everything["autoscaling"] = map[string]any{"enabled": true, "metrics": []any{map[string]any{
		"type": "External", "external": map[string]any{
			"metric": map[string]any{"name": "openoutbox_backlog_pending_count"},
			"target": map[string]any{"type": "AverageValue", "averageValue": "1000"}}}}}
	everything["podLabels"] = map[string]any{"tier": "backend"}
	everything["podAnnotations"] = map[string]any{"example.com/owner": "payments"}
	everything["commonLabels"] = map[string]any{"team": "payments"}
	everything["extraEnv"] = []any{map[string]any{"name": "PGSSLROOTCERT", "value": "/etc/outbox/ca/ca.crt"}}
	everything["extraEnvFrom"] = []any{map[string]any{"secretRef": map[string]any{"name": "more"}}}
	everything["extraVolumes"] = []any{map[string]any{"name": "ca", "secret": map[string]any{"secretName": "db-ca"}}}
	everything["extraVolumeMounts"] = []any{map[string]any{"name": "ca", "mountPath": "/etc/outbox/ca", "readOnly": true}}
	everything["imagePullSecrets"] = []any{map[string]any{"name": "regcred"}}
	everything["nodeSelector"] = map[string]any{"pool": "apps"}
	everything["tolerations"] = []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "apps", "effect": "NoSchedule"}}
	return map[string]map[string]any{
		"default":    defaults(),
		"everything": everything,
		"existing secret": {"secrets": map[string]any{"existingSecret": "mine"},
			"console": map[string]any{"enabled": true}},
	}
}

// Every manifest decodes strictly into its Kubernetes API type: a field
// misspelt or put at the wrong level fails here, not at kubectl apply.
func TestEveryManifestDecodesStrictly(t *testing.T) {
	for name, values := range variants() {
		files, err := renderFiles(values)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := decodeStrict(files); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The check itself refuses a field Kubernetes does not know.
	bad := map[string]string{"x.yaml": "apiVersion: v1\nkind: Service\nspec:\n  selectr: {a: b}\n"}
	if err := decodeStrict(bad); err == nil {
		t.Error("a Service with spec.selectr decoded")
	}
}

// The chart passes Helm's own lint (helm lint --strict would refuse its
// warnings too), for every variant of values.
func TestHelmLint(t *testing.T) {
	for name, values := range variants() {
		result := lint.All("outbox-relay", values, "apps", false)
		for _, m := range result.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: %v", name, m)
			} else {
				t.Logf("%s: %v", name, m)
			}
		}
	}
}

// The README's yaml examples are values the chart takes: each renders
// (over the README's secrets.yaml, the first example), decodes strictly
// and passes lint.
func TestTheREADMEExamplesRender(t *testing.T) {
	readme, err := os.ReadFile("outbox-relay/README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 4 {
		t.Fatalf("%d yaml examples in the README", len(blocks))
	}
	var base map[string]any
	if err := yaml.Unmarshal([]byte(blocks[0][1]), &base); err != nil || get(base, "secrets", "storageUrl") == nil {
		t.Fatalf("the README's first example is not secrets.yaml (%v):\n%s", err, blocks[0][1])
	}
	for i, b := range blocks {
		var example map[string]any
		if err := yaml.UnmarshalStrict([]byte(b[1]), &example); err != nil {
			t.Errorf("example %d: %v\n%s", i, err, b[1])
			continue
		}
		values := chartutil.MergeTables(example, base)
		if get(values, "console", "enabled") == true {
			values["secrets"].(map[string]any)["consolePassword"] = "pw"
		}
		files, err := renderFiles(values)
		if err == nil {
			err = decodeStrict(files)
		}
		if err != nil {
			t.Errorf("example %d: %v\n%s", i, err, b[1])
		}
		for _, m := range lint.All("outbox-relay", values, "apps", false).Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("example %d: %v", i, m)
			}
		}
	}
}

// NOTES.txt names every workload and Service the release installs, and
// says how to check the relay.
func TestNOTESNameWhatWasInstalled(t *testing.T) {
	for name, values := range variants() {
		files, err := renderFiles(values)
		if err != nil {
			t.Fatal(err)
		}
		notes := files["outbox-relay/templates/NOTES.txt"]
		objs, _ := tryRender(values)
		for _, o := range objs {
			switch o.kind() {
			case "Deployment", "Service", "CronJob", "Job", "ServiceAccount":
				if !strings.Contains(notes, o.name()) {
					t.Errorf("%s: NOTES.txt does not name %s %s:\n%s", name, o.kind(), o.name(), notes)
				}
			}
		}
		for _, want := range []string{"rollout status deployment/", "/readyz"} {
			if !strings.Contains(notes, want) {
				t.Errorf("%s: NOTES.txt lacks %q", name, want)
			}
		}
	}
}
