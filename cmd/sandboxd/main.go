// Command sandboxd runs the Docker-free, OpenSandbox-compatible sandbox server
// of package sandboxd as a daemon.
//
//	sandboxd [--listen 127.0.0.1:8080] [--data ./.alineo/sandboxd] [--api-key K]
//	         [--image NAME=DIR|TAR]... [--host-network] [--no-isolation] [--log-level info]
//	sandboxd image import [--data DIR] NAME ROOTFS.tar
//
// OPEN_SANDBOX_API_KEY is the default of --api-key.
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
	"time"

	"github.com/alineo-labs/alineo/cmd/internal/usage"
	"github.com/alineo-labs/alineo/sandboxd"
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
  image import NAME ROOTFS.tar   register a root filesystem tarball as an image
  help      print this help`

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

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "image" {
		return runImage(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "help" {
		return usage.Help(stdout, help)
	}
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "TCP address of the lifecycle API")
	data := fs.String("data", defaultDataDir, "data directory: records, images, sandbox layers")
	apiKey := fs.String("api-key", getenv("OPEN_SANDBOX_API_KEY"), "API key required in OPEN-SANDBOX-API-KEY (env OPEN_SANDBOX_API_KEY); empty = no auth")
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
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
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
	if fs.NArg() > 0 {
		return usage.Errorf(usage.Text(fs, help), "unexpected argument %q", fs.Arg(0))
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
	s, err := sandboxd.New(sandboxd.Config{Listen: *listen, DataDir: *data, APIKey: *apiKey, Images: images,
		NoIsolation: *noIso, HostNetwork: *hostNet, Logger: logger, Runtime: *runtime, DiskQuota: quotaBytes,
		ShmSize: shmBytes, MaxProcesses: *pids, AllowHosts: *allowHosts})
	if err != nil {
		return err
	}
	url, err := s.Start(ctx)
	if err != nil {
		return errors.Join(err, s.Close(context.Background()))
	}
	fmt.Fprintf(stdout, "sandboxd listening on %s (data %s)\n", url, s.DataDir())
	fmt.Fprintf(stdout, "images: %d registered; any other image name runs on the host's own /usr, /etc, /bin, /lib (read-only lower layer)\n", len(images))
	fmt.Fprintf(stdout, "clients: OPEN_SANDBOX_URL=%s\n", url)
	<-ctx.Done()
	fmt.Fprintln(stdout, "sandboxd shutting down")
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Close(cctx)
}

func runImage(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "import" {
		return usage.Errorf("", "usage: sandboxd image import [--data DIR] NAME ROOTFS.tar")
	}
	fs := flag.NewFlagSet("sandboxd image import", flag.ContinueOnError)
	data := fs.String("data", defaultDataDir, "data directory")
	if err := usage.Parse(fs, args[1:], "usage: sandboxd image import [--data DIR] NAME ROOTFS.tar", stdout); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usage.Errorf("", "usage: sandboxd image import [--data DIR] NAME ROOTFS.tar")
	}
	name, tarPath := fs.Arg(0), fs.Arg(1)
	if err := sandboxd.ImportImage(ctx, *data, name, tarPath); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "imported %s from %s into %s\n", name, tarPath, *data)
	return nil
}
