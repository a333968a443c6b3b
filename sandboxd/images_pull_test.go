package sandboxd_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/registrytest"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// imageServer starts a registry and a server that speaks to it, with a
// static sandbox init.
func imageServer(t *testing.T, cfg sandboxd.Config) (*registrytest.Registry, *sandboxd.Server, string) {
	t.Helper()
	reg := registrytest.New(t)
	cfg.InsecureRegistries = append(cfg.InsecureRegistries, reg.Host)
	if cfg.InitBinary == "" {
		cfg.InitBinary = registrytest.StaticInit(t, sandboxd.StaticBinary)
	}
	srv, base := startServer(t, cfg)
	return reg, srv, base
}

// appLayers are the layers of the test image: the static test program (the
// only executable: no libc, no shell), files, and a layer that whites out
// /etc/secret.txt.
func appLayers(t *testing.T) []v1.Layer {
	app := registrytest.App(t)
	return []v1.Layer{
		registrytest.Layer(t,
			registrytest.File{Name: "bin/", Type: tar.TypeDir},
			registrytest.File{Name: "bin/app", Mode: 0o755, Data: func() []byte { return app }},
			registrytest.File{Name: "etc/", Type: tar.TypeDir},
			registrytest.File{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/app\nworker:x:1000:1001::/home/worker:/bin/app\n"},
			registrytest.File{Name: "etc/group", Body: "root:x:0:\nworkers:x:1001:\n"},
			registrytest.File{Name: "etc/secret.txt", Body: "from the base layer\n"},
			registrytest.File{Name: "data/", Type: tar.TypeDir},
			registrytest.File{Name: "data/keep.txt", Body: "kept\n"},
			registrytest.File{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
			registrytest.File{Name: "root/", Type: tar.TypeDir, Mode: 0o700},
		),
		registrytest.Layer(t,
			registrytest.File{Name: "etc/.wh.secret.txt"},
			registrytest.File{Name: "data/new.txt", Body: "from the top layer\n"},
		),
	}
}

var appConfig = v1.Config{
	Env:        []string{"PATH=/bin", "GREETING=hello-from-image", "OVERRIDE=image"},
	WorkingDir: "/srv/app",
	Entrypoint: []string{"/bin/app"},
	Cmd:        []string{"sleep"},
}

// imageCreate creates a sandbox of image with no entrypoint (the image's).
func imageCreate(t *testing.T, base, image string, extra map[string]any) string {
	t.Helper()
	req := map[string]any{"image": map[string]any{"uri": image}, "entrypoint": nil}
	for k, v := range extra {
		req[k] = v
	}
	return create(t, base, req)
}

// waitFailed waits until sandbox id is Failed and returns its status.
func waitFailed(t *testing.T, base, id string) sandboxd.Status {
	t.Helper()
	var st sandboxd.Status
	testenv.Eventually(t, 30*time.Second, func() error {
		st = getSandbox(t, base, id).Status
		switch st.State {
		case sandboxd.StateFailed:
			return nil
		case sandboxd.StateRunning:
			t.Fatalf("sandbox %s is Running, want Failed", id)
		}
		return fmt.Errorf("state %s", st.State)
	})
	return st
}

func TestImageFromRegistry(t *testing.T) {
	reg, _, base := imageServer(t, sandboxd.Config{})
	layers := appLayers(t)
	image := reg.Push(t, "test/app:1", registrytest.Image(t, appConfig, layers...))
	id := imageCreate(t, base, image, map[string]any{"env": map[string]string{"OVERRIDE": "request"}})
	sb := waitState(t, base, id, sandboxd.StateRunning)
	if got, want := strings.Join(sb.Entrypoint, " "), "/bin/app sleep"; got != want {
		t.Errorf("entrypoint = %q, want the image's %q", got, want)
	}
	u, tok := execdEndpoint(t, base, id, false)
	for _, c := range []struct{ cmd, want string }{
		{"/bin/app cat /data/keep.txt /data/new.txt", "kept\nfrom the top layer"},
		{"/bin/app exists /etc/secret.txt", "no"}, // whited out by the top layer
		{"/bin/app exists /usr/bin/env", "no"},    // the host's files are not there
		{"/bin/app exists /lib64", "no"},          // nor its libc
		{"/bin/app pwd", "/srv/app"},              // the image's WorkingDir
		{"app cat '../../data/keep.txt'", "kept"}, // the image's PATH; cwd /srv/app
		{"/bin/app write /srv/app/w 'a b'", ""},   // quotes without a shell
		{"/bin/app cat /srv/app/w", "a b"},
	} {
		if got := sh(t, u, tok, c.cmd); got != c.want {
			t.Errorf("%s = %q, want %q", c.cmd, got, c.want)
		}
	}
	env := sh(t, u, tok, "/bin/app env")
	for _, kv := range []string{"GREETING=hello-from-image", "OVERRIDE=request", "PATH=/bin"} {
		if !slices.Contains(strings.Split(env, "\n"), kv) {
			t.Errorf("env lacks %s:\n%s", kv, env)
		}
	}
	// No shell in the image: a command that needs one is refused, clearly.
	if _, _, err := runErr(context.Background(), u, tok, "/bin/app env | grep PATH"); err == nil || !strings.Contains(err.Error(), "no shell") {
		t.Errorf("a pipe without a shell: %v, want an error saying there is no shell", err)
	}
	// Pause and resume.
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StatePaused)
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/resume", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StateRunning)
	if got := sh(t, u, tok, "/bin/app cat /srv/app/w"); got != "a b" {
		t.Errorf("after resume: %q", got)
	}

	// A second sandbox of the image: its layers are not fetched again.
	id2 := imageCreate(t, base, image, nil)
	waitState(t, base, id2, sandboxd.StateRunning)
	for _, l := range layers {
		if got, want := reg.BlobGets(registrytest.Digest(t, l)), 1; got != want {
			t.Errorf("layer %s fetched %d times for two sandboxes, want %d", registrytest.Digest(t, l), got, want)
		}
	}
	u2, tok2 := execdEndpoint(t, base, id2, false)
	if got := sh(t, u2, tok2, "/bin/app exists /srv/app/w"); got != "no" {
		t.Errorf("the second sandbox sees the first one's file: %q", got)
	}

	// The image's User.
	cfg := appConfig
	cfg.User = "worker:workers"
	userImage := reg.Push(t, "test/app:user", registrytest.Image(t, cfg, layers...))
	id3 := imageCreate(t, base, userImage, nil)
	waitState(t, base, id3, sandboxd.StateRunning)
	u3, tok3 := execdEndpoint(t, base, id3, false)
	if got := sh(t, u3, tok3, "/bin/app id"); got != "1000 1001" {
		t.Errorf("id in an image with User worker:workers = %q, want 1000 1001", got)
	}
}

func TestImageConcurrentCreates(t *testing.T) {
	reg, _, base := imageServer(t, sandboxd.Config{})
	layers := appLayers(t)
	image := reg.Push(t, "test/app:many", registrytest.Image(t, appConfig, layers...))
	ids := make([]string, 10)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = imageCreate(t, base, image, nil)
		}()
	}
	wg.Wait()
	for _, id := range ids {
		waitState(t, base, id, sandboxd.StateRunning)
	}
	for _, l := range layers {
		if got, want := reg.BlobGets(registrytest.Digest(t, l)), 1; got != want {
			t.Errorf("layer %s fetched %d times by 10 concurrent creates, want %d", registrytest.Digest(t, l), got, want)
		}
	}
}

// imageError is the body of an error answer.
type imageError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// imageRefused posts the create req, whose image cannot be had, and
// returns the answer's status and body. The create leaves no sandbox.
func imageRefused(t *testing.T, base string, req map[string]any) (int, imageError) {
	t.Helper()
	if _, ok := req["entrypoint"]; !ok {
		req["entrypoint"] = nil
	}
	r := call(t, "POST", base+"/v1/sandboxes", req)
	var e imageError
	r.decode(t, &e)
	if r.Status == http.StatusAccepted {
		t.Fatalf("create answered 202 %s; want an error", r.Body)
	}
	var list struct{ Items []sandboxd.Sandbox }
	call(t, "GET", base+"/v1/sandboxes?state=Failed", nil).decode(t, &list)
	for _, sb := range list.Items {
		if sb.Image != nil && sb.Image.URI == req["image"].(map[string]any)["uri"] {
			t.Errorf("the refused create left sandbox %s (%s: %s)", sb.ID, sb.Status.Reason, sb.Status.Message)
		}
	}
	return r.Status, e
}

// TestImageErrors (issue 40 item 7): a create whose image cannot be had is
// answered 404 IMAGE_NOT_FOUND or 424 IMAGE_UNAUTHORIZED/IMAGE_PULL_FAILED,
// the message naming the image and giving the registry's answer, and
// leaves no sandbox. A name with a registry host gets no hint (see
// TestImages for a short name's).
func TestImageErrors(t *testing.T) {
	reg, _, base := imageServer(t, sandboxd.Config{InsecureRegistries: []string{"127.0.0.1:1"}})
	layers := appLayers(t)
	private := registrytest.New(t)
	privImage := private.Push(t, "private/app:1", registrytest.Image(t, appConfig, layers...))
	private.RequireAuth("alice", "s3cret")
	_, _, privBase := imageServer(t, sandboxd.Config{InsecureRegistries: []string{private.Host}})
	for _, c := range []struct {
		name, base, image string
		status            int
		code, answer      string // answer: what the registry said, in the message
	}{
		{"unknown image", base, reg.Host + "/definitely/not-an-image:nope", http.StatusNotFound, sandboxd.ReasonImageNotFound, "NAME_UNKNOWN"},
		{"unknown tag", base, reg.Push(t, "test/app:1", registrytest.Image(t, appConfig, layers...))[:len(reg.Host)+len("/test/app")] + ":nope", http.StatusNotFound, sandboxd.ReasonImageNotFound, "MANIFEST_UNKNOWN"},
		{"unauthorized", privBase, privImage, http.StatusFailedDependency, sandboxd.ReasonImageUnauthorized, "UNAUTHORIZED"},
		{"unreachable registry", base, "127.0.0.1:1/test/app:1", http.StatusFailedDependency, sandboxd.ReasonImagePullFailed, "connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, e := imageRefused(t, c.base, map[string]any{"image": map[string]any{"uri": c.image}})
			if status != c.status || e.Code != c.code {
				t.Errorf("create = %d %s, want %d %s", status, e.Code, c.status, c.code)
			}
			if !strings.Contains(e.Message, c.image) || !strings.Contains(e.Message, c.answer) {
				t.Errorf("message %q does not name %s and give the registry's answer (%s)", e.Message, c.image, c.answer)
			}
			if strings.Contains(e.Message, "hint") {
				t.Errorf("message %q has a hint, for a name with a registry host", e.Message)
			}
			t.Logf("%d %s: %s", status, e.Code, e.Message)
		})
	}
	t.Run("digest mismatch", func(t *testing.T) {
		ls := appLayers(t)
		bad := registrytest.Layer(t, registrytest.File{Name: "corrupt.txt", Body: strings.Repeat("x", 4096)})
		image := reg.Push(t, "test/bad:1", registrytest.Image(t, appConfig, append(ls, bad)...))
		reg.Corrupt(registrytest.Digest(t, bad))
		status, e := imageRefused(t, base, map[string]any{"image": map[string]any{"uri": image}})
		if status != http.StatusFailedDependency || e.Code != sandboxd.ReasonImagePullFailed || !strings.Contains(e.Message, registrytest.Digest(t, bad)) {
			t.Errorf("create = %d %s: %s; want 424 IMAGE_PULL_FAILED naming the blob", status, e.Code, e.Message)
		}
	})
	t.Run("refused at create", func(t *testing.T) {
		r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "Not An Image"}, "entrypoint": []string{"x"}})
		wantStatus(t, r, http.StatusBadRequest)
		r = call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": sandboxd.HostImage}})
		wantStatus(t, r, http.StatusBadRequest) // the host image has no entrypoint of its own
		r = call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "x/y:1", "auth": map[string]any{"token": "t"}}, "entrypoint": []string{"x"}})
		wantStatus(t, r, http.StatusBadRequest)
	})
}

func TestImageAuth(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials
	reg, _, base := imageServer(t, sandboxd.Config{})
	layers := appLayers(t)
	a := reg.Push(t, "private/app:a", registrytest.Image(t, appConfig, layers...))
	b := reg.Push(t, "private/app:b", registrytest.Image(t, appConfig, layers...))
	reg.RequireAuth("alice", "s3cret")

	status, e := imageRefused(t, base, map[string]any{"image": map[string]any{"uri": a}})
	if status != http.StatusFailedDependency || e.Code != sandboxd.ReasonImageUnauthorized || !strings.Contains(e.Message, a) {
		t.Errorf("without credentials: %d %s: %s; want 424 IMAGE_UNAUTHORIZED naming the image", status, e.Code, e.Message)
	}
	status, e = imageRefused(t, base, map[string]any{"image": map[string]any{"uri": a, "auth": map[string]string{"username": "alice", "password": "nope"}}})
	if status != http.StatusFailedDependency || e.Code != sandboxd.ReasonImageUnauthorized {
		t.Errorf("with a wrong password: %d %s: %s; want 424 IMAGE_UNAUTHORIZED", status, e.Code, e.Message)
	}
	id := create(t, base, map[string]any{"image": map[string]any{"uri": a, "auth": map[string]string{"username": "alice", "password": "s3cret"}}, "entrypoint": nil})
	waitState(t, base, id, sandboxd.StateRunning)
	if sb := getSandbox(t, base, id); sb.Image == nil || len(sb.Image.Auth) != 0 {
		t.Errorf("GET shows image %+v: the credentials must not be echoed", sb.Image)
	}
	t.Setenv("DOCKER_CONFIG", reg.DockerConfig(t, "alice", "s3cret"))
	waitState(t, base, imageCreate(t, base, b, nil), sandboxd.StateRunning)
}

func TestImageSnapshot(t *testing.T) {
	reg, srv, base := imageServer(t, sandboxd.Config{})
	layers := appLayers(t)
	image := reg.Push(t, "test/app:snap", registrytest.Image(t, appConfig, layers...))
	src := imageCreate(t, base, image, nil)
	waitState(t, base, src, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, src, false)
	sh(t, u, tok, "/bin/app write /srv/app/state one")
	snap := snapshot(t, base, src, "")
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)

	check := func(t *testing.T, id, u, tok string) {
		t.Helper()
		if got := sh(t, u, tok, "/bin/app cat /srv/app/state /data/new.txt"); got != "onefrom the top layer" {
			t.Errorf("restored sandbox: %q", got)
		}
		if got := sh(t, u, tok, "/bin/app exists /etc/secret.txt"); got != "no" {
			t.Errorf("restored sandbox sees the whited-out file: %q", got)
		}
		if got := sh(t, u, tok, "/bin/app pwd"); got != "/srv/app" {
			t.Errorf("restored sandbox cwd = %q", got)
		}
	}
	// Restore (fork) while the image is in the store.
	id, u2, tok2 := fromSnapshot(t, base, snap.ID)
	check(t, id, u2, tok2)
	// A fork of the fork keeps the image.
	snap2 := snapshot(t, base, id, "")
	waitSnapshot(t, base, snap2.ID, sandboxd.SnapshotReady)

	// The image removed and collected: a restore pulls it again, by digest.
	for _, sid := range []string{src, id} {
		wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+sid, nil), http.StatusNoContent)
	}
	if err := srv.Images().Remove(image); err != nil {
		t.Fatal(err)
	}
	gs, err := srv.GCImages(context.Background())
	if err != nil || gs.Layers != len(layers) {
		t.Fatalf("GCImages = %+v, %v; want %d layers removed", gs, err, len(layers))
	}
	id3, u3, tok3 := fromSnapshot(t, base, snap2.ID)
	check(t, id3, u3, tok3)
	if got, want := reg.BlobGets(registrytest.Digest(t, layers[0])), 2; got != want {
		t.Errorf("base layer fetched %d times, want %d (pulled again after GC)", got, want)
	}
	// Layers of a live sandbox survive a GC although its image was removed.
	ims, err := srv.Images().List()
	if err != nil || len(ims) != 1 || !strings.Contains(ims[0].Name, "@sha256:") {
		t.Fatalf("images after the pull by digest: %+v, %v", ims, err)
	}
	if err := srv.Images().Remove(ims[0].Name); err != nil {
		t.Fatal(err)
	}
	if gs, err := srv.GCImages(context.Background()); err != nil || gs.Layers != 0 {
		t.Errorf("GCImages with a live sandbox = %+v, %v; want nothing removed", gs, err)
	}
	// Gone from the store and from the registry: the restore fails naming the image.
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id3, nil), http.StatusNoContent)
	if _, err := srv.GCImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg.Stop()
	r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"snapshotId": snap.ID})
	var e imageError
	r.decode(t, &e)
	if r.Status != http.StatusFailedDependency || e.Code != sandboxd.ReasonImagePullFailed || !strings.Contains(e.Message, image) {
		t.Errorf("restore with the image gone: %d %s: %s; want 424 IMAGE_PULL_FAILED naming %s", r.Status, e.Code, e.Message, image)
	}
}

func TestImageDynamicInitRefused(t *testing.T) {
	// A dynamically linked init: this test binary, when cgo is on (as under
	// the race detector, in CI).
	dyn, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := sandboxd.StaticBinary(dyn); err != nil || ok {
		t.Skipf("this test binary is not dynamically linked (CGO_ENABLED=0; %v)", err)
	}
	reg, _, base := imageServer(t, sandboxd.Config{InitBinary: dyn})
	image := reg.Push(t, "test/app:dyn", registrytest.Image(t, appConfig, appLayers(t)...))
	st := waitFailed(t, base, imageCreate(t, base, image, nil))
	if !strings.Contains(st.Message, "dynamically linked") || !strings.Contains(st.Message, "CGO_ENABLED=0") {
		t.Errorf("a dynamic init in an image without libc: %s: %s; want a message naming the fix", st.Reason, st.Message)
	}
}

func TestInitBinaryStatic(t *testing.T) {
	// What the server bind-mounts into image sandboxes is static.
	p := registrytest.StaticInit(t, sandboxd.StaticBinary)
	if p == "" {
		p, _ = os.Executable()
	}
	if ok, err := sandboxd.StaticBinary(p); err != nil || !ok {
		t.Errorf("the sandbox init %s is not static: %v", p, err)
	}
	if _, err := os.Stat(filepath.Clean(p)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := sandboxd.StaticBinary("/bin/sh"); ok {
		t.Log("/bin/sh is static here")
	}
	var err error
	if _, err = sandboxd.StaticBinary("/nonexistent"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("StaticBinary of a missing file: %v", err)
	}
}

// BenchmarkImageCreateFirstExec measures create until a first command
// answered (poll to Running, then exec) for a sandbox of a pulled image whose
// layers are cached, against the same for the host image, alternating, in
// one run. ratio-p50 = image / host (target ≤ 1.2).
func BenchmarkImageCreateFirstExec(b *testing.B) {
	reg := registrytest.New(b)
	_, base := startServer(b, sandboxd.Config{InsecureRegistries: []string{reg.Host}, InitBinary: registrytest.StaticInit(b, sandboxd.StaticBinary)})
	image := reg.Push(b, "bench/app:1", registrytest.Image(b, appConfig, appLayersB(b)...))
	firstExec := func(req map[string]any, cmd string) time.Duration {
		start := time.Now()
		id := create(b, base, req)
		for {
			sb := getSandbox(b, base, id)
			if sb.Status.State == sandboxd.StateRunning {
				break
			}
			if sb.Status.State.Final() {
				b.Fatalf("sandbox %s: %+v", id, sb.Status)
			}
			time.Sleep(500 * time.Microsecond)
		}
		u, tok := execdEndpoint(b, base, id, false)
		if _, code := run(b, u, tok, cmd); code != 0 {
			b.Fatalf("first exec %q: exit %d", cmd, code)
		}
		d := time.Since(start)
		wantStatus(b, call(b, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
		return d
	}
	imageReq := func() map[string]any { return map[string]any{"image": map[string]any{"uri": image}, "entrypoint": nil} }
	firstExec(imageReq(), "/bin/app pwd") // pulls the layers
	const n = 16
	for range b.N {
		var img, host []time.Duration
		for range n {
			img = append(img, firstExec(imageReq(), "/bin/app pwd"))
			host = append(host, firstExec(nil, "/bin/true"))
		}
		b.ReportMetric(ms(percentile(img, 50)), "image-p50-ms")
		b.ReportMetric(ms(percentile(host, 50)), "host-p50-ms")
		b.ReportMetric(float64(percentile(img, 50))/float64(percentile(host, 50)), "ratio-p50")
		testenv.Target(b, "ratio-p50", float64(percentile(img, 50))/float64(percentile(host, 50)), 1.2, true)
	}
}

// appLayersB is appLayers for a benchmark.
func appLayersB(b *testing.B) []v1.Layer {
	app := registrytest.App(b)
	return []v1.Layer{
		registrytest.Layer(b,
			registrytest.File{Name: "bin/", Type: tar.TypeDir},
			registrytest.File{Name: "bin/app", Mode: 0o755, Data: func() []byte { return app }},
			registrytest.File{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
		),
	}
}

func TestNoIsolationHostOnly(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{NoIsolation: true})
	r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "python:3.11"}, "entrypoint": []string{"sleep", "1"}})
	wantStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(string(r.Body), sandboxd.HostImage) {
		t.Errorf("body %s does not say which image works", r.Body)
	}
}
