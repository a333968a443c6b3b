// Command sandboxd runs the Docker-free, OpenSandbox-compatible sandbox server
// of package sandboxd as a daemon.
//
//	sandboxd [--listen 127.0.0.1:8080] [--data ./.alineo/sandboxd] [--api-key-file F]
//	         [--image NAME=DIR|TAR]... [--registry-mirror URL]... [--insecure-registry HOST:PORT]...
//	         [--init-binary PATH] [--host-network] [--no-isolation] [--log-level info]
//	         [--metrics 127.0.0.1:9466]
//	sandboxd image pull [--data DIR] [--registry-mirror URL]... [--insecure-registry HOST:PORT]... REF
//	sandboxd image ls [--data DIR]
//	sandboxd image rm [--data DIR] NAME|REF...
//	sandboxd image import [--data DIR] NAME ROOTFS.tar
//	sandboxd image gc [--data DIR]
//
// Image names are registry references (python:3.11, ghcr.io/org/app@sha256:…),
// pulled on first use into the layer store under --data, or "host": the
// host's own system directories. Registry credentials come from the Docker
// config file ($DOCKER_CONFIG or ~/.docker/config.json) and from a create
// request's image.auth.
//
// --metrics ADDR (SANDBOXD_METRICS_ADDR) serves the server's Prometheus
// metrics (alineo_sandboxd_*: sandboxes by state, create and command
// latency, image pulls, snapshot bytes and operations) at /metrics and its
// health at /healthz: 503 naming the first failure when the OCI runtime is
// gone, the data directory is not writable or the checkpoint store does not
// answer.
//
// The API key comes from OPEN_SANDBOX_API_KEY, --api-key-file or (with a
// warning: every host user reads a command line) --api-key.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alineo-labs/alineo/internal/metricsrv"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/sandboxd/egress"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	usage.Exit("sandboxd", run(ctx, os.Args[1:], os.Getenv, os.Stdout))
}

const help = `usage: sandboxd [flags]
       sandboxd COMMAND ...

Runs the OpenSandbox-compatible sandbox server until SIGTERM.

commands:
  image pull REF                 pull an image into the layer store
  image ls                       list the images in the store
  image rm REF                   remove an image record (its layers go at the next gc)
  image import NAME ROOTFS.tar   register a root filesystem tarball as an image
  image gc                       remove the layers no image or sandbox uses (server stopped)
  help                           print this help

Flags go before or after the command and its arguments; --version prints the
version. sandboxd runs as root (user namespaces, mounts, cgroups).`

// listFlag collects a repeated flag's values.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// imageFlags collects repeated --image NAME=PATH flags.
type imageFlags map[string]string

func (f imageFlags) String() string { return fmt.Sprint(map[string]string(f)) }

func (f imageFlags) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want NAME=DIR or NAME=ROOTFS.tar, got %q", v)
	}
	f[name] = path
	return nil
}

const defaultDataDir = "./.alineo/sandboxd"

// errNeedsRoot is the answer to a start as another user than root.
var errNeedsRoot = errors.New("sandboxd needs root (user namespaces, mounts, cgroups)")

// geteuid is os.Geteuid; the tests replace it.
var geteuid = os.Geteuid

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	switch cmd, rest := usage.Command(args, imageFlagSet()); {
	case cmd == "image":
		return runImage(ctx, rest, stdout)
	case cmd == "help":
		return usage.Help(stdout, help)
	case cmd == "version":
		return usage.PrintVersion(stdout, "sandboxd")
	}
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "TCP address of the lifecycle API")
	data := fs.String("data", defaultDataDir, "data directory: records, images, sandbox layers")
	apiKey := fs.String("api-key", "", "API key required in OPEN-SANDBOX-API-KEY; empty = no auth. Prefer OPEN_SANDBOX_API_KEY or --api-key-file: a command line is readable by every host user")
	apiKeyFile := fs.String("api-key-file", "", "file holding the API key (its first line), e.g. mode 0600")
	allowOld := fs.Bool("allow-old-runtime", false, "accept a runc without the fixes of CVE-2025-31133, -52565 and -52881 (before 1.2.8, 1.3.3, 1.4.0)")
	images := imageFlags{}
	fs.Var(images, "image", "register an image: NAME=DIR or NAME=ROOTFS.tar (repeatable)")
	noIso := fs.Bool("no-isolation", false, "DEVELOPMENT ONLY: run sandboxes as plain host processes, without namespaces")
	hostNet := fs.Bool("host-network", false, "sandboxes without a networkPolicy share the host's network, loopback services included (default: own namespace, egress proxy refusing the host's addresses)")
	runtime := fs.String("runtime", "runc", "OCI runtime binary every sandbox runs under (a path or a name in PATH): runc, crun, runsc (gVisor), kata-runtime")
	quota := fs.String("disk-quota", "10GiB", "size of each sandbox's writable layer (e.g. 10GiB, 512MiB); 0 disables the quota")
	shm := fs.String("shm-size", "64MiB", "size of each sandbox's /dev/shm")
	pids := fs.Int("max-processes", 1024, "pids limit of each sandbox (fork-bomb guard)")
	allowHosts := &listFlag{}
	fs.Var(allowHosts, "allow-host", "open IP:PORT (or localhost:PORT) of this host to sandboxes whose policy allows it (repeatable); every other address of this host is closed to every sandbox")
	defMem := fs.String("default-memory", "2GiB", "memory limit of a sandbox whose resourceLimits name none; 0 means no limit")
	volumeRoots := &listFlag{}
	fs.Var(volumeRoots, "volume-root", "host directory below which `host` volumes may bind host paths (repeatable); without one, host volumes are refused")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	mirrors, insecure := registryFlags(fs)
	initBin := fs.String("init-binary", "", "statically linked sandbox init bind-mounted into every sandbox as its init and execd: sandboxd-init (cmd/sandboxd-init) or a sandboxd, of this sandboxd's init protocol (default: sandboxd-init next to this executable when it is of the same build, else this executable, which must then be static to run in images: CGO_ENABLED=0)")
	pullTimeout := fs.Duration("pull-timeout", 10*time.Minute, "bound of the image pull of a create")
	ckpts := fs.String("checkpoints", getenv("SANDBOXD_CHECKPOINTS"), "snapshots' checkpoint store: postgres://… shared by a fleet's hosts, or a SQLite path (env SANDBOXD_CHECKPOINTS; default a SQLite file under --data)")
	blobs := fs.String("blobs", getenv("SANDBOXD_BLOBS"), "snapshots' blob store: file://DIR, s3://BUCKET?endpoint=…&region=…&use_path_style=true (AWS credentials from the environment), gs://, azblob:// (env SANDBOXD_BLOBS; default a folder under --data)")
	blobCache := fs.String("blob-cache", "4GiB", "local read cache of a remote --blobs store")
	metricsAddr := fs.String("metrics", getenv("SANDBOXD_METRICS_ADDR"), "address of /metrics (Prometheus, alineo_sandboxd_*) and /healthz (runtime, data directory, checkpoint store) (env SANDBOXD_METRICS_ADDR; e.g. 127.0.0.1:9466); empty for none")
	volQuota := fs.String("volume-quota", "", "size of the disk of its own of a managed (pvc) volume whose request names no storage (default: --disk-quota); 0: none")
	if err := usage.Parse(fs, args, help, stdout); err != nil {
		return err
	}
	quotaBytes, err := sandboxd.ParseSize(*quota)
	if err != nil {
		return fmt.Errorf("--disk-quota: %w", err)
	}
	if quotaBytes == 0 {
		quotaBytes = -1 // Config: negative disables
	}
	shmBytes, err := sandboxd.ParseSize(*shm)
	if err != nil || shmBytes <= 0 {
		return fmt.Errorf("--shm-size: want a size such as 64MiB, got %q", *shm)
	}
	var volBytes int64
	if *volQuota != "" {
		if volBytes, err = sandboxd.ParseSize(*volQuota); err != nil {
			return fmt.Errorf("--volume-quota: %w", err)
		}
		if volBytes == 0 {
			volBytes = -1 // Config: negative means no disk of its own
		}
	}
	cacheBytes, err := sandboxd.ParseSize(*blobCache)
	if err != nil || cacheBytes <= 0 {
		return fmt.Errorf("--blob-cache: want a size such as 4GiB, got %q", *blobCache)
	}
	memBytes, err := sandboxd.ParseSize(*defMem)
	if err != nil {
		return fmt.Errorf("--default-memory: %w", err)
	}
	if memBytes == 0 {
		memBytes = -1 // Config: negative means no limit
	}
	if fs.NArg() > 0 {
		return usage.Errorf(usage.Text(fs, help), "unexpected argument %q", fs.Arg(0))
	}
	// Said at once, before anything fails on a permission (the run
	// directory, a mount, a cgroup) with a message that does not say why.
	if geteuid() != 0 {
		return errNeedsRoot
	}
	key, err := resolveAPIKey(*apiKey, *apiKeyFile, getenv("OPEN_SANDBOX_API_KEY"), stdout)
	if err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: lvl}))
	if *noIso {
		fmt.Fprintln(stdout, "WARNING: --no-isolation: sandboxes run as plain host processes with full access to this machine. Development only.")
	} else if *hostNet {
		fmt.Fprintln(stdout, "WARNING: --host-network: sandboxes without a networkPolicy can reach every service of this machine, loopback included.")
	}
	metrics, egressMetrics := sandboxd.NewMetrics(), egress.NewMetrics()
	s, err := sandboxd.Open(ctx, sandboxd.Config{Metrics: metrics, EgressMetrics: egressMetrics, Listen: *listen, DataDir: *data, APIKey: key, Images: images, AllowOldRuntime: *allowOld,
		NoIsolation: *noIso, HostNetwork: *hostNet, Logger: logger, Runtime: *runtime, DiskQuota: quotaBytes,
		ShmSize: shmBytes, MaxProcesses: *pids, AllowHosts: *allowHosts, DefaultMemory: memBytes,
		VolumeRoots: *volumeRoots, RegistryMirrors: *mirrors, InsecureRegistries: *insecure, InitBinary: *initBin,
		PullTimeout: *pullTimeout, Checkpoints: *ckpts, Blobs: *blobs, BlobCacheBytes: cacheBytes, VolumeQuota: volBytes})
	if err != nil {
		return err
	}
	url, err := s.Start(ctx)
	if err != nil {
		return errors.Join(err, s.Close(context.Background()))
	}
	fmt.Fprintf(stdout, "sandboxd listening on %s (data %s)\n", url, s.DataDir())
	if *metricsAddr != "" {
		reg := metricsrv.NewRegistry()
		reg.MustRegister(metrics, egressMetrics)
		// Served until the server is closed.
		mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		addr, _, err := metricsrv.Serve(mctx, *metricsAddr, metricsrv.Handler(reg, s.Ready))
		if err != nil {
			return errors.Join(fmt.Errorf("metrics: %w", err), s.Close(context.Background()))
		}
		fmt.Fprintf(stdout, "metrics on http://%s/metrics, health on http://%s/healthz\n", addr, addr)
	}
	fmt.Fprintf(stdout, "images: %q is the host's own /usr, /etc, /bin, /lib (read-only); %d registered with --image; any other name is pulled from its registry\n", sandboxd.HostImage, len(images))
	fmt.Fprintf(stdout, "clients: OPEN_SANDBOX_URL=%s\n", url)
	<-ctx.Done()
	fmt.Fprintln(stdout, "sandboxd shutting down")
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Close(cctx)
}

// registryFlags adds the registry flags to fs.
func registryFlags(fs *flag.FlagSet) (mirrors, insecure *listFlag) {
	mirrors, insecure = &listFlag{}, &listFlag{}
	fs.Var(mirrors, "registry-mirror", "Docker Hub mirror tried before Docker Hub: https://HOST[:PORT] (repeatable)")
	fs.Var(insecure, "insecure-registry", "registry HOST:PORT spoken to in plain HTTP (repeatable); every other registry is HTTPS only")
	return mirrors, insecure
}

const imageUsage = "usage: sandboxd image pull|ls|rm|import|gc [--data DIR] [ARGS]"

// imageCmdFlags adds the flags of the image commands to fs.
func imageCmdFlags(fs *flag.FlagSet) (data *string, mirrors, insecure *listFlag) {
	data = fs.String("data", defaultDataDir, "data directory")
	mirrors, insecure = registryFlags(fs)
	return data, mirrors, insecure
}

// imageFlagSet is a FlagSet of the image commands' flags, for usage.Command.
func imageFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("sandboxd image", flag.ContinueOnError)
	imageCmdFlags(fs)
	return fs
}

func runImage(ctx context.Context, args []string, stdout io.Writer) error {
	cmd, args := usage.Command(args, imageFlagSet())
	if cmd == "" {
		return usage.Errorf("", imageUsage)
	}
	fs := flag.NewFlagSet("sandboxd image "+cmd, flag.ContinueOnError)
	data, mirrors, insecure := imageCmdFlags(fs)
	head := "usage: sandboxd image " + cmd + " [--data DIR] [ARGS]"
	if cmd == "import" {
		head = "usage: sandboxd image import [--data DIR] NAME ROOTFS.tar"
	}
	if err := usage.Parse(fs, args, head, stdout); err != nil {
		return err
	}
	cfg := sandboxd.Config{RegistryMirrors: *mirrors, InsecureRegistries: *insecure,
		Logger: slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	switch cmd {
	case "import":
		if fs.NArg() != 2 {
			return usage.Errorf("", "usage: sandboxd image import [--data DIR] NAME ROOTFS.tar")
		}
		name, tarPath := fs.Arg(0), fs.Arg(1)
		if err := sandboxd.ImportImage(ctx, *data, name, tarPath); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "imported %s from %s into %s\n", name, tarPath, *data)
		return nil
	case "gc":
		if fs.NArg() != 0 {
			return usage.Errorf("", "usage: sandboxd image gc [--data DIR]")
		}
		st, err := sandboxd.GCImages(ctx, *data, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %d layers (%d bytes) and %d image records\n", st.Layers, st.Bytes, st.Manifests)
		return nil
	case "pull", "ls", "rm":
	default:
		return usage.Errorf("", imageUsage)
	}
	st, err := sandboxd.OpenImages(*data, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	switch cmd {
	case "pull":
		if fs.NArg() != 1 {
			return usage.Errorf("", "usage: sandboxd image pull [--data DIR] REF")
		}
		im, err := st.Pull(ctx, fs.Arg(0), nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s (%d layers, %d bytes)\n", im.Name, im.Digest, len(im.Layers), im.Size())
	case "ls":
		ims, err := st.List()
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDIGEST\tLAYERS\tSIZE\tPULLED")
		for _, im := range ims {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", im.Name, im.Digest, len(im.Layers), im.Size(), im.Pulled.Format(time.RFC3339))
		}
		for _, name := range sandboxd.ImportedImages(*data) {
			fmt.Fprintf(tw, "%s\t(imported)\t1\t-\t-\n", name)
		}
		return tw.Flush()
	case "rm":
		if fs.NArg() == 0 {
			return usage.Errorf("", "usage: sandboxd image rm [--data DIR] NAME|REF [NAME|REF]")
		}
		for _, ref := range fs.Args() {
			if err := sandboxd.RemoveImage(*data, st, ref); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "removed %s (its layers go at the next gc)\n", ref)
		}
	}
	return nil
}

// resolveAPIKey picks the API key: --api-key-file, else --api-key (with a
// warning on stdout, since /proc/PID/cmdline is readable by every host
// user), else the environment. Two sources at once are refused.
func resolveAPIKey(flagKey, file, env string, stdout io.Writer) (string, error) {
	if flagKey != "" && file != "" {
		return "", errors.New("--api-key and --api-key-file: give one")
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--api-key-file: %w", err)
		}
		key, _, _ := strings.Cut(string(b), "\n")
		if key = strings.TrimSpace(key); key == "" {
			return "", fmt.Errorf("--api-key-file %s: the file's first line is empty", file)
		}
		return key, nil
	}
	if flagKey != "" {
		fmt.Fprintln(stdout, "WARNING: --api-key on the command line is readable by every user of this host (/proc/PID/cmdline); use OPEN_SANDBOX_API_KEY or --api-key-file")
		return flagKey, nil
	}
	return env, nil
}
