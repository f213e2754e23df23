// Package helm holds the test of the outbox-relay Helm chart: it renders
// the chart with Helm's own libraries, for the default values and for
// variants, and checks the manifests. It is a module of its own so that
// the relay's dependency tree stays free of Helm's.
package helm

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

// The URLs of the default install, whose passwords must reach the Secret
// and nothing else.
const (
	storageURL   = "postgres://relay:Db-Pa55word@db:5432/app?sslmode=verify-full"
	publisherURL = "nats://relay:Nats-Pa55word@nats:4222"
)

// object is one rendered manifest.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }

func (o object) name() string { return str(o, "metadata", "name") }

// get walks o by map keys and list indexes.
func get(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := o.(map[string]any)
			if !ok {
				if om, isObj := o.(object); isObj {
					m, ok = om, true
				}
			}
			if !ok {
				return nil
			}
			o = m[k]
		case int:
			l, ok := o.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

func str(o any, path ...any) string {
	s, _ := get(o, path...).(string)
	return s
}

// render renders the chart with values and returns its objects.
func render(t *testing.T, values map[string]any) []object {
	t.Helper()
	objs, err := tryRender(values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderFiles renders the chart with values and returns its files by name.
func renderFiles(values map[string]any) (map[string]string, error) {
	ch, err := loader.Load("outbox-relay")
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: "orders", Namespace: "apps", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

func tryRender(values map[string]any) ([]object, error) {
	files, err := renderFiles(values)
	if err != nil {
		return nil, err
	}
	var objs []object
	for _, doc := range documents(files) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// documents returns the manifests of the rendered files, in the order of
// the files' names.
func documents(files map[string]string) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	var docs []string
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) != "" {
				docs = append(docs, doc)
			}
		}
	}
	return docs
}

func stripComments(doc string) string {
	var out []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// find returns the objects of kind, by name.
func find(objs []object, kind string) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		if o.kind() == kind {
			out[o.name()] = o
		}
	}
	return out
}

func only(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	o, ok := find(objs, kind)[name]
	if !ok {
		t.Fatalf("no %s %s among %v", kind, name, kinds(objs))
	}
	return o
}

func kinds(objs []object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.kind()+"/"+o.name())
	}
	return out
}

func defaults() map[string]any {
	return map[string]any{"secrets": map[string]any{"storageUrl": storageURL, "publisherUrl": publisherURL}}
}

// env resolves the relay container's environment as Kubernetes would:
// envFrom's ConfigMaps, then env (literal values, or "secret:<name>/<key>").
func env(t *testing.T, objs []object, container any) map[string]string {
	t.Helper()
	out := map[string]string{}
	from, _ := get(container, "envFrom").([]any)
	for _, f := range from {
		if get(f, "configMapRef") == nil {
			continue
		}
		cm := only(t, objs, "ConfigMap", str(f, "configMapRef", "name"))
		data, _ := get(cm, "data").(map[string]any)
		for k, v := range data {
			out[k], _ = v.(string)
		}
	}
	list, _ := get(container, "env").([]any)
	for _, e := range list {
		name := str(e, "name")
		switch {
		case get(e, "valueFrom", "secretKeyRef") != nil:
			out[name] = "secret:" + str(e, "valueFrom", "secretKeyRef", "name") + "/" + str(e, "valueFrom", "secretKeyRef", "key")
		case get(e, "valueFrom", "fieldRef") != nil:
			out[name] = "field:" + str(e, "valueFrom", "fieldRef", "fieldPath")
		default:
			out[name] = str(e, "value")
		}
	}
	return out
}

func TestTheDefaultInstall(t *testing.T) {
	objs := render(t, defaults())
	deploy := only(t, objs, "Deployment", "orders-outbox-relay")
	pod := get(deploy, "spec", "template", "spec")
	relay := get(pod, "containers", 0)
	if str(relay, "livenessProbe", "httpGet", "path") != "/healthz" || str(relay, "readinessProbe", "httpGet", "path") != "/readyz" {
		t.Errorf("probes: liveness %v, readiness %v", get(relay, "livenessProbe"), get(relay, "readinessProbe"))
	}
	checkRestricted(t, "the relay", pod)
	e := env(t, objs, relay)
	for name, want := range map[string]string{
		"STORAGE_URL":   "secret:orders-outbox-relay/storage-url",
		"PUBLISHER_URL": "secret:orders-outbox-relay/publisher-url",
		"RELAY_ID":      "field:metadata.name",
		"HTTP_ADDR":     ":8080",
	} {
		if e[name] != want {
			t.Errorf("%s = %q, want %q", name, e[name], want)
		}
	}
	grace, _ := get(pod, "terminationGracePeriodSeconds").(float64)
	shutdown, err := strconv.Atoi(strings.TrimSuffix(e["SHUTDOWN_TIMEOUT"], "s"))
	if err != nil || int(grace) <= shutdown {
		t.Errorf("terminationGracePeriodSeconds %v is not above SHUTDOWN_TIMEOUT %q", grace, e["SHUTDOWN_TIMEOUT"])
	}

	job := only(t, objs, "Job", "orders-outbox-relay-migrate")
	hooks := str(job, "metadata", "annotations", "helm.sh/hook")
	if !strings.Contains(hooks, "pre-install") || !strings.Contains(hooks, "pre-upgrade") {
		t.Errorf("the migrate Job's hooks are %q, want pre-install and pre-upgrade", hooks)
	}
	jobPod := get(job, "spec", "template", "spec")
	checkRestricted(t, "the migrate Job", jobPod)
	if args := get(jobPod, "containers", 0, "args"); !slices.Equal(toStrings(args), []string{"migrate"}) {
		t.Errorf("the migrate Job runs %v", args)
	}
	only(t, objs, "Service", "orders-outbox-relay")
	cron := only(t, objs, "CronJob", "orders-outbox-relay-prune")
	checkRestricted(t, "the prune CronJob", get(cron, "spec", "jobTemplate", "spec", "template", "spec"))
	if len(find(objs, "ServiceMonitor")) != 0 || len(find(objs, "Deployment")) != 1 {
		t.Errorf("the default install has %v; want no ServiceMonitor and no console", kinds(objs))
	}
	noSecretInConfigMaps(t, objs)
}

// Every setting docs/configuration.md lists, set in config, arrives as the
// environment variable of that name, with its value; the settings that
// hold secrets, or that the chart owns, are refused there.
func TestEverySettingOfTheDocsArrivesAsItsVariable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 40 {
		t.Fatalf("found %d settings in docs/configuration.md; teach this test to read them", len(rows))
	}
	config := map[string]any{}
	var refused []string
	for _, r := range rows {
		name := r[1]
		switch {
		case strings.HasSuffix(name, "_URL"), name == "HTTP_ADDR", name == "SERVER_PORT":
			refused = append(refused, name)
		case name == "SHUTDOWN_TIMEOUT":
			config[name] = "40s"
		default:
			config[name] = "value of " + name
		}
	}
	values := defaults()
	values["config"] = config
	objs := render(t, values)
	pod := get(only(t, objs, "Deployment", "orders-outbox-relay"), "spec", "template", "spec")
	e := env(t, objs, get(pod, "containers", 0))
	for name, want := range config {
		if e[name] != want {
			t.Errorf("%s = %q, want %q", name, e[name], want)
		}
	}
	if grace, _ := get(pod, "terminationGracePeriodSeconds").(float64); grace != 55 {
		t.Errorf("terminationGracePeriodSeconds = %v with SHUTDOWN_TIMEOUT=40s, want 55", grace)
	}
	noSecretInConfigMaps(t, objs)
	for _, name := range refused {
		values := defaults()
		values["config"] = map[string]any{name: "postgres://u:leak@db/app"}
		if _, err := tryRender(values); err == nil || !strings.Contains(err.Error(), "config."+name) {
			t.Errorf("config.%s rendered (%v); want it refused, naming it", name, err)
		}
	}
}

// A Secret of the user's own, the ServiceMonitor and the console, without
// the prune CronJob.
func TestAnExistingSecretAMonitorAndTheConsole(t *testing.T) {
	objs := render(t, map[string]any{
		"secrets":        map[string]any{"existingSecret": "orders-urls"},
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
		"console":        map[string]any{"enabled": true},
		"prune":          map[string]any{"enabled": false},
	})
	if len(find(objs, "Secret")) != 0 {
		t.Errorf("the chart made a Secret beside the existing one: %v", kinds(objs))
	}
	relay := get(only(t, objs, "Deployment", "orders-outbox-relay"), "spec", "template", "spec", "containers", 0)
	if e := env(t, objs, relay); e["STORAGE_URL"] != "secret:orders-urls/storage-url" || e["PUBLISHER_URL"] != "secret:orders-urls/publisher-url" {
		t.Errorf("the relay's URLs come from %q and %q, want the existing Secret", e["STORAGE_URL"], e["PUBLISHER_URL"])
	}
	job := get(only(t, objs, "Job", "orders-outbox-relay-migrate"), "spec", "template", "spec", "containers", 0)
	if e := env(t, objs, job); e["STORAGE_URL"] != "secret:orders-urls/owner-storage-url" {
		t.Errorf("the migrate Job's URL comes from %q, want the owner's key of the existing Secret", e["STORAGE_URL"])
	}
	sm := only(t, objs, "ServiceMonitor", "orders-outbox-relay")
	if str(sm, "spec", "endpoints", 0, "path") != "/metrics" || str(sm, "metadata", "labels", "release") != "kube-prometheus" {
		t.Errorf("ServiceMonitor %v", sm)
	}
	console := only(t, objs, "Deployment", "orders-outbox-relay-console")
	consolePod := get(console, "spec", "template", "spec")
	checkRestricted(t, "the console", consolePod)
	if !slices.Contains(toStrings(get(consolePod, "containers", 0, "args")), "--password-file") {
		t.Errorf("the console runs without a password file: %v", get(consolePod, "containers", 0, "args"))
	}
	// The relay's Service selects the relay's pods, not the console's.
	svc := only(t, objs, "Service", "orders-outbox-relay")
	if str(svc, "spec", "selector", "app.kubernetes.io/component") != "relay" {
		t.Errorf("the relay's Service selects %v", get(svc, "spec", "selector"))
	}
	if len(find(objs, "CronJob")) != 0 {
		t.Errorf("prune.enabled=false still renders a CronJob")
	}
}

// Without URLs and without an existing Secret the chart refuses to render,
// naming what to set.
func TestMissingURLsAreRefused(t *testing.T) {
	if _, err := tryRender(map[string]any{}); err == nil || !strings.Contains(err.Error(), "secrets.storageUrl") {
		t.Fatalf("render without URLs: %v, want a refusal naming secrets.storageUrl", err)
	}
}

// checkRestricted checks a pod against the restricted Pod Security
// Standard's main points.
func checkRestricted(t *testing.T, what string, pod any) {
	t.Helper()
	if get(pod, "securityContext", "runAsNonRoot") != true || str(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Errorf("%s: pod securityContext %v", what, get(pod, "securityContext"))
	}
	containers, _ := get(pod, "containers").([]any)
	for _, c := range containers {
		sc := get(c, "securityContext")
		if get(sc, "allowPrivilegeEscalation") != false || get(sc, "readOnlyRootFilesystem") != true ||
			!slices.Equal(toStrings(get(sc, "capabilities", "drop")), []string{"ALL"}) {
			t.Errorf("%s: container %s securityContext %v", what, str(c, "name"), sc)
		}
	}
}

// noSecretInConfigMaps checks that no password of the URLs is in a
// ConfigMap.
func noSecretInConfigMaps(t *testing.T, objs []object) {
	t.Helper()
	for _, cm := range find(objs, "ConfigMap") {
		data, _ := yaml.Marshal(get(cm, "data"))
		for _, secret := range []string{"Db-Pa55word", "Nats-Pa55word", storageURL, publisherURL} {
			if strings.Contains(string(data), secret) {
				t.Errorf("ConfigMap %s holds %q in clear", cm.name(), secret)
			}
		}
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}

// labelsOf returns a map of string labels at path.
func labelsOf(o any, path ...any) map[string]string {
	m, _ := get(o, path...).(map[string]any)
	out := map[string]string{}
	for k, v := range m {
		out[k], _ = v.(string)
	}
	return out
}

// matches tells whether every label of selector is in labels, as a
// Service's selector or a matchLabels selector matches. An empty selector
// matches nothing here: the chart never means "everything".
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// podTemplates returns the pod templates of the workloads, by kind/name.
func podTemplates(objs []object) map[string]any {
	out := map[string]any{}
	for _, o := range objs {
		switch o.kind() {
		case "Deployment", "Job":
			out[o.kind()+"/"+o.name()] = get(o, "spec", "template")
		case "CronJob":
			out[o.kind()+"/"+o.name()] = get(o, "spec", "jobTemplate", "spec", "template")
		}
	}
	return out
}

// selected returns the names of the pod templates whose labels sel matches.
func selected(objs []object, sel map[string]string) []string {
	var out []string
	for name, tmpl := range podTemplates(objs) {
		if matches(sel, labelsOf(tmpl, "metadata", "labels")) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Every selector selects what it is meant to, and nothing else: the
// ServiceMonitor the relay's Service, each Service its own pods, the
// PodDisruptionBudget and the topology spread the relay's pods, each
// Deployment its pod template; with the names overridden too.
func TestEverySelectorSelectsItsTargets(t *testing.T) {
	for variant, more := range map[string]map[string]any{
		"default":          {},
		"nameOverride":     {"nameOverride": "relay"},
		"fullnameOverride": {"fullnameOverride": "outbox", "commonLabels": map[string]any{"team": "payments"}, "podLabels": map[string]any{"tier": "backend"}},
	} {
		values := defaults()
		values["serviceMonitor"] = map[string]any{"enabled": true}
		values["console"] = map[string]any{"enabled": true}
		values["secrets"].(map[string]any)["consolePassword"] = "console-Pa55word"
		for k, v := range more {
			values[k] = v
		}
		objs := render(t, values)
		var relay, relaySvc string
		for name, d := range find(objs, "Deployment") {
			if !strings.HasSuffix(name, "-console") {
				relay = "Deployment/" + name
			}
			sel := labelsOf(d, "spec", "selector", "matchLabels")
			if got := selected(objs, sel); !slices.Equal(got, []string{"Deployment/" + name}) {
				t.Errorf("%s: Deployment %s (selector %v) selects %v, want its own pods alone", variant, name, sel, got)
			}
			for _, c := range toMaps(get(d, "spec", "template", "spec", "topologySpreadConstraints")) {
				if got := selected(objs, labelsOf(c, "labelSelector", "matchLabels")); !slices.Equal(got, []string{"Deployment/" + name}) {
					t.Errorf("%s: Deployment %s spreads %v", variant, name, got)
				}
			}
		}
		services := find(objs, "Service")
		if len(services) != 2 {
			t.Fatalf("%s: Services %v", variant, kinds(objs))
		}
		for name, svc := range services {
			got := selected(objs, labelsOf(svc, "spec", "selector"))
			if len(got) != 1 {
				t.Errorf("%s: Service %s (selector %v) selects %v, want one Deployment's pods", variant, name, get(svc, "spec", "selector"), got)
			} else if got[0] == relay {
				relaySvc = name
			}
		}
		if relaySvc == "" {
			t.Fatalf("%s: no Service selects the relay's pods", variant)
		}
		for _, sm := range find(objs, "ServiceMonitor") {
			var scraped []string
			for _, svc := range services {
				if matches(labelsOf(sm, "spec", "selector", "matchLabels"), labelsOf(svc, "metadata", "labels")) {
					scraped = append(scraped, svc.name())
				}
			}
			if !slices.Equal(scraped, []string{relaySvc}) {
				t.Errorf("%s: the ServiceMonitor (selector %v) selects the Services %v, want the relay's alone",
					variant, get(sm, "spec", "selector"), scraped)
			}
			for _, port := range toMaps(get(sm, "spec", "endpoints")) {
				if !slices.ContainsFunc(toMaps(get(services[relaySvc], "spec", "ports")), func(p map[string]any) bool { return p["name"] == port["port"] }) {
					t.Errorf("%s: the ServiceMonitor scrapes port %v, which the Service lacks", variant, port["port"])
				}
			}
		}
		if len(find(objs, "ServiceMonitor")) != 1 {
			t.Errorf("%s: %v, want one ServiceMonitor", variant, kinds(objs))
		}
		pdbs := find(objs, "PodDisruptionBudget")
		if len(pdbs) != 1 {
			t.Errorf("%s: %v, want one PodDisruptionBudget", variant, kinds(objs))
		}
		for name, pdb := range pdbs {
			if got := selected(objs, labelsOf(pdb, "spec", "selector", "matchLabels")); !slices.Equal(got, []string{relay}) {
				t.Errorf("%s: PodDisruptionBudget %s selects %v, want the relay's pods", variant, name, got)
			}
		}
	}
}

func toMaps(v any) []map[string]any {
	l, _ := v.([]any)
	var out []map[string]any
	for _, x := range l {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// imagePullSecrets, nodeSelector, tolerations and affinity reach every pod
// the chart makes, and every container has resources: a namespace whose
// ResourceQuota requires them admits each.
func TestEveryPodGetsPlacementPullSecretsAndResources(t *testing.T) {
	placement := map[string]any{
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"nodeSelector":     map[string]any{"pool": "apps"},
		"tolerations":      []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "apps", "effect": "NoSchedule"}},
		"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{
				map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64"}}}}}}}},
	}
	values := defaults()
	for k, v := range placement {
		values[k] = v
	}
	values["console"] = map[string]any{"enabled": true}
	values["secrets"].(map[string]any)["consolePassword"] = "console-Pa55word"
	objs := render(t, values)
	pods := podTemplates(objs)
	if len(pods) != 4 {
		t.Fatalf("pod templates %v; want the relay, the console, prune and migrate", kinds(objs))
	}
	for name, tmpl := range pods {
		spec := get(tmpl, "spec")
		for k, want := range placement {
			w, _ := yaml.Marshal(want)
			g, _ := yaml.Marshal(get(spec, k))
			if string(w) != string(g) {
				t.Errorf("%s: %s is %s, want %s", name, k, g, w)
			}
		}
		containers, _ := get(spec, "containers").([]any)
		for _, c := range containers {
			if str(c, "resources", "requests", "cpu") == "" || str(c, "resources", "requests", "memory") == "" || str(c, "resources", "limits", "memory") == "" {
				t.Errorf("%s: container %s has resources %v, want cpu and memory requests and a memory limit", name, str(c, "name"), get(c, "resources"))
			}
		}
	}
}

// Helm waits for a hook --timeout (5 minutes by default), while the
// migrate Job may run activeDeadlineSeconds, retries included. The
// timeouts the README and NOTES.txt give outlast the Job's deadline.
func TestTheDocumentedTimeoutOutlastsTheMigrateJob(t *testing.T) {
	timeout := regexp.MustCompile(`--timeout (\d+)m\b`)
	deadline := func(objs []object) int {
		d, _ := get(only(t, objs, "Job", "orders-outbox-relay-migrate"), "spec", "activeDeadlineSeconds").(float64)
		return int(d)
	}
	readme, err := os.ReadFile("outbox-relay/README.md")
	if err != nil {
		t.Fatal(err)
	}
	d := deadline(render(t, defaults()))
	m := timeout.FindAllStringSubmatch(string(readme), -1)
	if len(m) == 0 {
		t.Fatal("the README gives no --timeout for helm upgrade")
	}
	for _, x := range m {
		if minutes, _ := strconv.Atoi(x[1]); minutes*60 <= d {
			t.Errorf("the README says --timeout %sm; the migrate Job's deadline is %d s", x[1], d)
		}
	}
	for _, secs := range []int{60, 299, 3600, 3601, 7200} {
		values := defaults()
		values["migrate"] = map[string]any{"activeDeadlineSeconds": secs}
		files, err := renderFiles(values)
		if err != nil {
			t.Fatal(err)
		}
		objs := render(t, values)
		if d := deadline(objs); d != secs {
			t.Fatalf("activeDeadlineSeconds %d rendered as %d", secs, d)
		}
		notes := files["outbox-relay/templates/NOTES.txt"]
		m := timeout.FindStringSubmatch(notes)
		if m == nil {
			t.Fatalf("NOTES.txt gives no --timeout with activeDeadlineSeconds %d:\n%s", secs, notes)
		}
		if minutes, _ := strconv.Atoi(m[1]); minutes*60 <= secs {
			t.Errorf("NOTES.txt says --timeout %sm for a deadline of %d s", m[1], secs)
		}
	}
}

// secretRefs returns the Secret keys a pod template needs, as
// "<secret>/<key>", and those it reads if present ("?" after them).
func secretRefs(tmpl any) []string {
	var out []string
	spec := get(tmpl, "spec")
	containers, _ := get(spec, "containers").([]any)
	for _, c := range containers {
		for _, e := range toMaps(get(c, "env")) {
			if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
				r := str(ref, "name") + "/" + str(ref, "key")
				if get(ref, "optional") == true {
					r += "?"
				}
				out = append(out, r)
			}
		}
		for _, f := range toMaps(get(c, "envFrom")) {
			if ref := get(f, "secretRef"); ref != nil {
				out = append(out, str(ref, "name")+"/*")
			}
		}
	}
	for _, v := range toMaps(get(spec, "volumes")) {
		for _, item := range toMaps(get(v, "secret", "items")) {
			out = append(out, str(v, "secret", "secretName")+"/"+str(item, "key"))
		}
	}
	slices.Sort(out)
	return out
}

func stringData(t *testing.T, objs []object, name string) map[string]string {
	t.Helper()
	return labelsOf(only(t, objs, "Secret", name), "stringData")
}

// The chart's Secret is an object of the release, not a hook: helm get
// manifest shows it, upgrades update it, uninstall deletes it. The migrate
// hook, which runs before the release's objects exist, reads the owner's
// URL from a hook Secret of its own, made before it and deleted after it.
func TestTheSecretIsAReleaseObjectAndMigrateHasItsOwn(t *testing.T) {
	values := defaults()
	values["secrets"].(map[string]any)["ownerStorageUrl"] = "postgres://owner:Owner-Pa55@db/app"
	objs := render(t, values)
	secret := only(t, objs, "Secret", "orders-outbox-relay")
	if hook := get(secret, "metadata", "annotations", "helm.sh/hook"); hook != nil {
		t.Errorf("the release's Secret is a %v hook", hook)
	}
	data := stringData(t, objs, "orders-outbox-relay")
	if data["storage-url"] != storageURL || data["publisher-url"] != publisherURL {
		t.Errorf("the release's Secret holds %v", data)
	}
	for k, v := range data {
		if strings.Contains(v, "Owner-Pa55") {
			t.Errorf("the release's Secret keeps the owner's URL (%s) beyond the hook", k)
		}
	}

	job := only(t, objs, "Job", "orders-outbox-relay-migrate")
	refs := secretRefs(get(job, "spec", "template"))
	if len(refs) != 1 {
		t.Fatalf("the migrate Job reads %v, want one URL", refs)
	}
	name, key, _ := strings.Cut(refs[0], "/")
	hookSecret := only(t, objs, "Secret", name)
	if name == secret.name() {
		t.Fatalf("the migrate hook reads the release's Secret, which does not exist yet on install")
	}
	if got := stringData(t, objs, name)[key]; got != "postgres://owner:Owner-Pa55@db/app" {
		t.Errorf("the migrate Job's %s is %q, want the owner's URL", refs[0], got)
	}
	ann := func(o object, k string) string { return str(o, "metadata", "annotations", "helm.sh/"+k) }
	if ann(hookSecret, "hook") != ann(job, "hook") {
		t.Errorf("the hook Secret is made on %q, the Job runs on %q", ann(hookSecret, "hook"), ann(job, "hook"))
	}
	sw, _ := strconv.Atoi(ann(hookSecret, "hook-weight"))
	jw, _ := strconv.Atoi(ann(job, "hook-weight"))
	if sw >= jw {
		t.Errorf("the hook Secret's weight %d is not below the Job's %d", sw, jw)
	}
	policy := strings.Split(ann(hookSecret, "hook-delete-policy"), ",")
	if !slices.Contains(policy, "before-hook-creation") || !slices.Contains(policy, "hook-succeeded") {
		t.Errorf("the hook Secret's delete policy is %v; want it replaced on each run and gone after", policy)
	}
	for name, tmpl := range podTemplates(objs) {
		if name == "Job/orders-outbox-relay-migrate" {
			continue
		}
		for _, r := range secretRefs(tmpl) {
			if strings.HasPrefix(r, hookSecret.name()+"/") {
				t.Errorf("%s reads the migrate hook's Secret, which is gone after the hook", name)
			}
		}
	}

	// Without an owner's URL, migrate runs with storageUrl.
	objs = render(t, defaults())
	refs = secretRefs(get(only(t, objs, "Job", "orders-outbox-relay-migrate"), "spec", "template"))
	name, key, _ = strings.Cut(refs[0], "/")
	if got := stringData(t, objs, name)[key]; got != storageURL {
		t.Errorf("without ownerStorageUrl the migrate Job's URL is %q, want storageUrl", got)
	}
}

// A change in the chart's Secret rolls the pods that read it at start.
func TestPodsRollWhenTheSecretChanges(t *testing.T) {
	sums := func(storage, password string) map[string]string {
		values := defaults()
		values["secrets"].(map[string]any)["storageUrl"] = storage
		values["secrets"].(map[string]any)["consolePassword"] = password
		values["console"] = map[string]any{"enabled": true}
		out := map[string]string{}
		for name, d := range find(render(t, values), "Deployment") {
			out[name] = str(d, "spec", "template", "metadata", "annotations", "checksum/secret")
		}
		return out
	}
	a, b, c := sums(storageURL, "one"), sums(storageURL+"&x=1", "one"), sums(storageURL, "two")
	for name := range a {
		if a[name] == "" || a[name] == b[name] || a[name] == c[name] {
			t.Errorf("Deployment %s: checksum/secret %q, %q after a new storageUrl, %q after a new password", name, a[name], b[name], c[name])
		}
	}
	if len(a) != 2 {
		t.Errorf("Deployments %v, want the relay and the console", a)
	}
}

// Every URL setting of docs/configuration.md, and the OTLP headers, which
// hold API keys, can come from the Secret; none of them can be put in the
// ConfigMap.
func TestEverySecretSettingComesFromTheSecret(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}
	for _, r := range regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]+_URL)` \\|").FindAllStringSubmatch(string(doc), -1) {
		names = append(names, r[1])
	}
	if !slices.Contains(names, "WAL_STORAGE_URL") {
		t.Fatalf("found %v in docs/configuration.md", names)
	}
	secretEnv := map[string]any{}
	for _, n := range names {
		if n != "STORAGE_URL" && n != "PUBLISHER_URL" {
			secretEnv[n] = "secret value of " + n
		}
	}
	values := defaults()
	values["secrets"].(map[string]any)["env"] = secretEnv
	objs := render(t, values)
	relay := get(only(t, objs, "Deployment", "orders-outbox-relay"), "spec", "template", "spec", "containers", 0)
	e := env(t, objs, relay)
	data := stringData(t, objs, "orders-outbox-relay")
	for _, n := range names {
		ref, ok := strings.CutPrefix(e[n], "secret:orders-outbox-relay/")
		if !ok {
			t.Errorf("%s = %q, want it from the Secret", n, e[n])
			continue
		}
		want := "secret value of " + n
		switch n {
		case "STORAGE_URL":
			want = storageURL
		case "PUBLISHER_URL":
			want = publisherURL
		}
		if data[ref] != want {
			t.Errorf("%s reads key %s of the Secret, which holds %q", n, ref, data[ref])
		}
	}
	for _, cm := range find(objs, "ConfigMap") {
		if y, _ := yaml.Marshal(cm); strings.Contains(string(y), "secret value of") {
			t.Errorf("ConfigMap %s holds a secret setting", cm.name())
		}
	}
	for _, n := range names {
		values := defaults()
		values["config"] = map[string]any{n: "api-key=leak"}
		if _, err := tryRender(values); err == nil || !strings.Contains(err.Error(), "config."+n) {
			t.Errorf("config.%s rendered (%v); want it refused, naming it", n, err)
		}
	}
}

// An existing Secret needs only the keys of the features in use: the
// relay's two URLs, and a key per job or feature that is on; the optional
// settings are read if the Secret has them.
func TestAnExistingSecretNeedsOnlyTheKeysInUse(t *testing.T) {
	needed := func(values map[string]any) []string {
		objs := render(t, values)
		var out []string
		for _, tmpl := range podTemplates(objs) {
			for _, r := range secretRefs(tmpl) {
				if !strings.HasSuffix(r, "?") && !slices.Contains(out, r) {
					out = append(out, r)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	own := func(more map[string]any) map[string]any {
		v := map[string]any{"secrets": map[string]any{"existingSecret": "mine",
			"keys": map[string]any{"ownerStorageUrl": "", "adminStorageUrl": ""}}}
		for k, x := range more {
			v[k] = x
		}
		return v
	}
	for _, c := range []struct {
		values map[string]any
		want   []string
	}{
		{own(nil), []string{"mine/publisher-url", "mine/storage-url"}},
		{own(map[string]any{"console": map[string]any{"enabled": true}}),
			[]string{"mine/console-password", "mine/publisher-url", "mine/storage-url"}},
		{map[string]any{"secrets": map[string]any{"existingSecret": "mine"}},
			[]string{"mine/admin-storage-url", "mine/owner-storage-url", "mine/publisher-url", "mine/storage-url"}},
		{map[string]any{"secrets": map[string]any{"existingSecret": "mine"}, "migrate": map[string]any{"enabled": false}, "prune": map[string]any{"enabled": false}},
			[]string{"mine/publisher-url", "mine/storage-url"}},
	} {
		if got := needed(c.values); !slices.Equal(got, c.want) {
			t.Errorf("values %v need the keys %v, want %v", c.values, got, c.want)
		}
	}
	objs := render(t, own(nil))
	refs := secretRefs(get(only(t, objs, "Deployment", "orders-outbox-relay"), "spec", "template"))
	for _, want := range []string{"mine/wal-storage-url?", "mine/otlp-headers?"} {
		if !slices.Contains(refs, want) {
			t.Errorf("the relay reads %v from an existing Secret; want %s, optional", refs, want)
		}
	}
}

// with returns the default values with more set at the top level.
func with(more map[string]any) map[string]any {
	values := defaults()
	for k, v := range more {
		values[k] = v
	}
	return values
}

func relayPod(t *testing.T, objs []object) any {
	t.Helper()
	return get(only(t, objs, "Deployment", "orders-outbox-relay"), "spec", "template", "spec")
}

// A PodDisruptionBudget, topology spread with several replicas, and a
// startupProbe before liveness and readiness.
func TestAvailabilityAndPlacement(t *testing.T) {
	objs := render(t, defaults())
	pdb := only(t, objs, "PodDisruptionBudget", "orders-outbox-relay")
	if get(pdb, "spec", "maxUnavailable") != float64(1) {
		t.Errorf("PodDisruptionBudget %v", get(pdb, "spec"))
	}
	if got := get(only(t, render(t, with(map[string]any{"podDisruptionBudget": map[string]any{"minAvailable": 2}})), "PodDisruptionBudget", "orders-outbox-relay"), "spec"); get(got, "minAvailable") != float64(2) || get(got, "maxUnavailable") != nil {
		t.Errorf("podDisruptionBudget.minAvailable=2: %v", got)
	}
	if len(find(render(t, with(map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}})), "PodDisruptionBudget")) != 0 {
		t.Error("podDisruptionBudget.enabled=false still renders one")
	}

	keys := func(pod any) []string {
		var out []string
		for _, c := range toMaps(get(pod, "topologySpreadConstraints")) {
			out = append(out, str(c, "topologyKey"))
		}
		return out
	}
	if got := keys(relayPod(t, objs)); !slices.Equal(got, []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"}) {
		t.Errorf("two replicas spread over %v, want nodes and zones", got)
	}
	if got := keys(relayPod(t, render(t, with(map[string]any{"replicaCount": 1})))); len(got) != 0 {
		t.Errorf("one replica spreads over %v", got)
	}
	if got := keys(relayPod(t, render(t, with(map[string]any{"replicaCount": 1, "autoscaling": map[string]any{"enabled": true}})))); len(got) != 2 {
		t.Errorf("with autoscaling the relay spreads over %v", got)
	}
	own := []any{map[string]any{"topologyKey": "rack", "maxSkew": 2, "whenUnsatisfiable": "DoNotSchedule",
		"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/component": "relay"}}}}
	if got := keys(relayPod(t, render(t, with(map[string]any{"topologySpreadConstraints": own})))); !slices.Equal(got, []string{"rack"}) {
		t.Errorf("topologySpreadConstraints of one's own: %v", got)
	}

	relay := get(relayPod(t, objs), "containers", 0)
	if str(relay, "startupProbe", "httpGet", "path") != "/healthz" || get(relay, "startupProbe", "failureThreshold") != float64(60) {
		t.Errorf("startupProbe %v", get(relay, "startupProbe"))
	}
	if got := get(relayPod(t, render(t, with(map[string]any{"startupProbe": nil}))), "containers", 0, "startupProbe"); got != nil {
		t.Errorf("startupProbe: null renders %v", got)
	}
}

// The chart's pods run as a ServiceAccount of their own, without an API
// token; the migrate hook, which runs before that ServiceAccount exists,
// as the namespace's default.
func TestAServiceAccountOfItsOwn(t *testing.T) {
	values := with(map[string]any{"console": map[string]any{"enabled": true}})
	values["secrets"].(map[string]any)["consolePassword"] = "pw"
	objs := render(t, values)
	sa := only(t, objs, "ServiceAccount", "orders-outbox-relay")
	if get(sa, "automountServiceAccountToken") != false {
		t.Errorf("ServiceAccount %v mounts its token", sa)
	}
	for name, tmpl := range podTemplates(objs) {
		want := "orders-outbox-relay"
		if name == "Job/orders-outbox-relay-migrate" {
			want = "default"
		}
		if got := str(tmpl, "spec", "serviceAccountName"); got != want {
			t.Errorf("%s runs as %q, want %q", name, got, want)
		}
		if get(tmpl, "spec", "automountServiceAccountToken") != false {
			t.Errorf("%s mounts an API token", name)
		}
	}
	objs = render(t, with(map[string]any{"serviceAccount": map[string]any{"create": false, "name": "relay-sa"}}))
	if len(find(objs, "ServiceAccount")) != 0 || str(relayPod(t, objs), "serviceAccountName") != "relay-sa" {
		t.Errorf("serviceAccount.create=false, name=relay-sa: %v, the relay runs as %q", kinds(objs), str(relayPod(t, objs), "serviceAccountName"))
	}
}

// podLabels, podAnnotations, commonLabels, extraEnv, extraEnvFrom,
// extraVolumes and extraVolumeMounts reach every pod and container;
// nameOverride and fullnameOverride name the objects.
func TestCustomisationReachesEveryPod(t *testing.T) {
	values := with(map[string]any{
		"console":           map[string]any{"enabled": true},
		"podLabels":         map[string]any{"tier": "backend"},
		"podAnnotations":    map[string]any{"example.com/owner": "payments"},
		"commonLabels":      map[string]any{"team": "payments"},
		"extraEnv":          []any{map[string]any{"name": "PGSSLROOTCERT", "value": "/etc/outbox/ca/ca.crt"}},
		"extraEnvFrom":      []any{map[string]any{"secretRef": map[string]any{"name": "more"}}},
		"extraVolumes":      []any{map[string]any{"name": "ca", "secret": map[string]any{"secretName": "db-ca"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "/etc/outbox/ca", "readOnly": true}},
	})
	values["secrets"].(map[string]any)["consolePassword"] = "pw"
	objs := render(t, values)
	for _, o := range objs {
		if str(o, "metadata", "labels", "team") != "payments" {
			t.Errorf("%s/%s lacks commonLabels", o.kind(), o.name())
		}
	}
	for name, tmpl := range podTemplates(objs) {
		if str(tmpl, "metadata", "labels", "tier") != "backend" || str(tmpl, "metadata", "labels", "team") != "payments" ||
			str(tmpl, "metadata", "annotations", "example.com/owner") != "payments" {
			t.Errorf("%s: pod metadata %v", name, get(tmpl, "metadata"))
		}
		if !slices.ContainsFunc(toMaps(get(tmpl, "spec", "volumes")), func(v map[string]any) bool { return v["name"] == "ca" }) {
			t.Errorf("%s: volumes %v", name, get(tmpl, "spec", "volumes"))
		}
		containers, _ := get(tmpl, "spec", "containers").([]any)
		for _, c := range containers {
			if e := env(t, objs, c); e["PGSSLROOTCERT"] != "/etc/outbox/ca/ca.crt" {
				t.Errorf("%s: container %s lacks extraEnv", name, str(c, "name"))
			}
			if !slices.ContainsFunc(toMaps(get(c, "envFrom")), func(f map[string]any) bool { return str(f, "secretRef", "name") == "more" }) {
				t.Errorf("%s: container %s lacks extraEnvFrom: %v", name, str(c, "name"), get(c, "envFrom"))
			}
			if !slices.ContainsFunc(toMaps(get(c, "volumeMounts")), func(m map[string]any) bool { return m["mountPath"] == "/etc/outbox/ca" }) {
				t.Errorf("%s: container %s lacks extraVolumeMounts", name, str(c, "name"))
			}
		}
	}
	objs = render(t, with(map[string]any{"nameOverride": "relay"}))
	d := only(t, objs, "Deployment", "orders-relay")
	if got := str(d, "spec", "template", "spec", "serviceAccountName"); got != "orders-relay" || str(d, "metadata", "labels", "app.kubernetes.io/name") != "relay" {
		t.Errorf("nameOverride: the relay runs as %q", got)
	}
	objs = render(t, with(map[string]any{"fullnameOverride": "outbox"}))
	for _, o := range objs {
		if !strings.HasPrefix(o.name(), "outbox") {
			t.Errorf("fullnameOverride=outbox: %s/%s", o.kind(), o.name())
		}
	}
}

// autoscaling.enabled: an HPA on CPU scales the relay's Deployment, which
// no longer sets replicas; or on metrics of one's own.
func TestAutoscaling(t *testing.T) {
	objs := render(t, with(map[string]any{"autoscaling": map[string]any{"enabled": true, "minReplicas": 2, "maxReplicas": 5}}))
	hpa := only(t, objs, "HorizontalPodAutoscaler", "orders-outbox-relay")
	if str(hpa, "spec", "scaleTargetRef", "name") != "orders-outbox-relay" || str(hpa, "spec", "scaleTargetRef", "kind") != "Deployment" ||
		get(hpa, "spec", "maxReplicas") != float64(5) || str(hpa, "spec", "metrics", 0, "resource", "name") != "cpu" {
		t.Errorf("HPA %v", get(hpa, "spec"))
	}
	if r := get(only(t, objs, "Deployment", "orders-outbox-relay"), "spec", "replicas"); r != nil {
		t.Errorf("with autoscaling the Deployment sets replicas %v: each upgrade would undo the HPA", r)
	}
	if len(find(render(t, defaults()), "HorizontalPodAutoscaler")) != 0 {
		t.Error("an HPA by default")
	}
}

// The chart's copies of the alerts and the dashboard are the files of
// deploy/prometheus and deploy/grafana (the chart cannot read files
// outside itself); the PrometheusRule holds those alerts, the dashboard's
// ConfigMap that dashboard, and the ServiceMonitor's job is the one the
// alerts name.
func TestMonitoringCopiesAndTheirObjects(t *testing.T) {
	for copy, source := range map[string]string{
		"outbox-relay/files/alerts.yml":        "../prometheus/alerts.yml",
		"outbox-relay/files/outbox-relay.json": "../grafana/dashboards/outbox-relay.json",
	} {
		a, errA := os.ReadFile(copy)
		b, errB := os.ReadFile(source)
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s is not a copy of %s (%v, %v): cp %[2]s %[1]s", copy, source, errA, errB)
		}
	}
	values := with(map[string]any{
		"serviceMonitor":   map[string]any{"enabled": true},
		"prometheusRule":   map[string]any{"enabled": true, "labels": map[string]any{"release": "kps"}},
		"grafanaDashboard": map[string]any{"enabled": true, "annotations": map[string]any{"grafana_folder": "Outbox"}},
		"nameOverride":     "relay",
	})
	objs := render(t, values)
	rule := only(t, objs, "PrometheusRule", "orders-relay")
	var source map[string]any
	alerts, _ := os.ReadFile("../prometheus/alerts.yml")
	if err := yaml.Unmarshal(alerts, &source); err != nil {
		t.Fatal(err)
	}
	got, _ := yaml.Marshal(get(rule, "spec", "groups"))
	want, _ := yaml.Marshal(source["groups"])
	if string(got) != string(want) || str(rule, "metadata", "labels", "release") != "kps" {
		t.Errorf("the PrometheusRule's groups differ from alerts.yml:\n%s", got)
	}
	if !strings.Contains(string(got), "{{ $value") {
		t.Error("the alerts' templates did not survive rendering")
	}
	// The job the ServiceMonitor gives the targets is the one the alerts
	// look for (up{job="outbox-relay"}).
	sm := only(t, objs, "ServiceMonitor", "orders-relay")
	svc := only(t, objs, "Service", "orders-relay")
	job := str(svc, "metadata", "labels", str(sm, "spec", "jobLabel"))
	if !strings.Contains(string(alerts), `job="`+job+`"`) {
		t.Errorf("the ServiceMonitor names the job %q (jobLabel %q); the alerts look for another", job, str(sm, "spec", "jobLabel"))
	}

	cm := only(t, objs, "ConfigMap", "orders-relay-dashboard")
	dashboard, _ := os.ReadFile("../grafana/dashboards/outbox-relay.json")
	if str(cm, "data", "outbox-relay.json") != strings.TrimRight(string(dashboard), "\n") ||
		str(cm, "metadata", "labels", "grafana_dashboard") != "1" || str(cm, "metadata", "annotations", "grafana_folder") != "Outbox" {
		t.Errorf("the dashboard's ConfigMap: labels %v, annotations %v, %d bytes of JSON", get(cm, "metadata", "labels"),
			get(cm, "metadata", "annotations"), len(str(cm, "data", "outbox-relay.json")))
	}
	var v any
	if err := json.Unmarshal([]byte(str(cm, "data", "outbox-relay.json")), &v); err != nil {
		t.Errorf("the dashboard's JSON: %v", err)
	}
	if objs := render(t, defaults()); len(find(objs, "PrometheusRule")) != 0 || len(find(objs, "ConfigMap")) != 1 {
		t.Errorf("by default: %v", kinds(objs))
	}
}

// networkPolicy.enabled: one policy over every pod of the release, with
// egress to DNS, the database and the broker named, and nothing else.
func TestTheNetworkPolicy(t *testing.T) {
	db := map[string]any{"ipBlock": map[string]any{"cidr": "10.0.12.0/24"}}
	broker := map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "nats"}}}
	values := with(map[string]any{
		"console": map[string]any{"enabled": true},
		"networkPolicy": map[string]any{"enabled": true,
			"database": map[string]any{"to": []any{db}, "ports": []any{map[string]any{"port": 5432, "protocol": "TCP"}}},
			"broker":   map[string]any{"to": []any{broker}, "ports": []any{map[string]any{"port": 4222, "protocol": "TCP"}}}},
	})
	values["secrets"].(map[string]any)["consolePassword"] = "pw"
	objs := render(t, values)
	np := only(t, objs, "NetworkPolicy", "orders-outbox-relay")
	if got := selected(objs, labelsOf(np, "spec", "podSelector", "matchLabels")); len(got) != 4 {
		t.Errorf("the NetworkPolicy selects %v, want the release's four pod templates", got)
	}
	egress := toMaps(get(np, "spec", "egress"))
	has := func(port float64, peer any) bool {
		return slices.ContainsFunc(egress, func(r map[string]any) bool {
			w, _ := yaml.Marshal(peer)
			g, _ := yaml.Marshal(get(r, "to", 0))
			return get(r, "ports", 0, "port") == port && string(w) == string(g)
		})
	}
	if !has(5432, db) || !has(4222, broker) || !has(53, nil) || len(egress) != 3 {
		t.Errorf("egress %v, want DNS, the database and the broker", egress)
	}
	if !slices.Equal(toStrings(get(np, "spec", "policyTypes")), []string{"Ingress", "Egress"}) {
		t.Errorf("policyTypes %v", get(np, "spec", "policyTypes"))
	}
	if len(find(render(t, defaults()), "NetworkPolicy")) != 0 {
		t.Error("a NetworkPolicy by default")
	}
}

// console.ingress: an Ingress to the console's Service and port, with TLS.
func TestTheConsoleIngress(t *testing.T) {
	values := with(map[string]any{"console": map[string]any{"enabled": true, "ingress": map[string]any{
		"enabled": true, "className": "nginx", "host": "outbox.example.com",
		"tls": []any{map[string]any{"secretName": "console-tls", "hosts": []any{"outbox.example.com"}}}}}})
	values["secrets"].(map[string]any)["consolePassword"] = "pw"
	objs := render(t, values)
	ing := only(t, objs, "Ingress", "orders-outbox-relay-console")
	backend := get(ing, "spec", "rules", 0, "http", "paths", 0, "backend", "service")
	svc := only(t, objs, "Service", str(backend, "name"))
	if str(svc, "spec", "ports", 0, "name") != str(backend, "port", "name") || str(ing, "spec", "tls", 0, "secretName") != "console-tls" ||
		str(ing, "spec", "ingressClassName") != "nginx" || str(ing, "spec", "rules", 0, "host") != "outbox.example.com" {
		t.Errorf("Ingress %v", get(ing, "spec"))
	}
	console := get(only(t, objs, "Deployment", "orders-outbox-relay-console"), "spec", "template", "spec", "containers", 0)
	if str(console, "livenessProbe", "tcpSocket", "port") != "http" {
		t.Errorf("the console's livenessProbe %v", get(console, "livenessProbe"))
	}
	values["console"].(map[string]any)["ingress"].(map[string]any)["host"] = ""
	if _, err := tryRender(values); err == nil || !strings.Contains(err.Error(), "console.ingress.host") {
		t.Errorf("an Ingress without a host: %v", err)
	}
}

// values.schema.json: a misspelt value, or one of the wrong type, fails
// the install with its path, here and in helm install.
func TestTheSchemaRefusesTyposWithTheirPath(t *testing.T) {
	for _, c := range []struct {
		values map[string]any
		path   string
	}{
		{with(map[string]any{"replicaCont": 3}), "replicaCont"},
		{with(map[string]any{"console": map[string]any{"ingres": map[string]any{"enabled": true}}}), "ingres"},
		{with(map[string]any{"migrate": map[string]any{"activeDeadlineSecond": 7200}}), "activeDeadlineSecond"},
		{with(map[string]any{"podDisruptionBudget": map[string]any{"enabled": "yes"}}), "/podDisruptionBudget/enabled"},
		{with(map[string]any{"secrets": map[string]any{"storageUrl": storageURL, "publisherUrl": publisherURL, "existingSecretEnv": map[string]any{"wal-url": "x"}}}), "wal-url"},
	} {
		_, err := tryRender(c.values)
		if err == nil || !strings.Contains(err.Error(), c.path) {
			t.Errorf("values %v: %v; want a refusal naming %s", c.values, err, c.path)
		} else {
			t.Log(err)
		}
	}
}

// secrets.env with an existing Secret would be lost: it is refused, and so
// is a setting both in config and in secrets.env.
func TestSecretEnvMistakesAreRefused(t *testing.T) {
	for want, values := range map[string]map[string]any{
		"secrets.existingSecretEnv": {"secrets": map[string]any{"existingSecret": "mine", "env": map[string]any{"WAL_STORAGE_URL": "x"}}},
		"keep it in secrets.env":    with(map[string]any{"config": map[string]any{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"}}),
		"secrets.env.STORAGE_URL":   {"secrets": map[string]any{"storageUrl": storageURL, "publisherUrl": publisherURL, "env": map[string]any{"STORAGE_URL": "x"}}},
	} {
		if want == "keep it in secrets.env" {
			values["secrets"].(map[string]any)["env"] = map[string]any{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://u:p@otel"}
		}
		if _, err := tryRender(values); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %v: %v, want a refusal saying %q", values, err, want)
		}
	}
}
