package amqptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Broker is a RabbitMQ node of the test's own, for faults that would touch
// every user of the shared broker: a memory alarm (which blocks all
// publishers of a node) is one. It listens on loopback ports of its own,
// keeps its data, logs and Erlang cookie in a temporary directory, and is
// stopped when the test ends.
type Broker struct {
	url  string
	node string
	dir  string
	bin  string
}

// rabbitBinDir finds the directory of the rabbitmq-server and rabbitmqctl
// scripts that run as the calling user. Debian's /usr/sbin wrappers switch
// to the rabbitmq user (and its home, where the shared broker's cookie
// lives), so the scripts behind them are used.
func rabbitBinDir() (string, error) {
	if dir := os.Getenv("RABBITMQ_BIN_DIR"); dir != "" {
		return dir, nil
	}
	for _, dir := range []string{"/usr/lib/rabbitmq/bin"} {
		if _, err := os.Stat(filepath.Join(dir, "rabbitmq-server")); err == nil {
			return dir, nil
		}
	}
	path, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return "", errors.New("rabbitmq-server is not installed (set RABBITMQ_BIN_DIR to the directory of rabbitmq-server and rabbitmqctl)")
	}
	return filepath.Dir(path), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartBroker starts a private RabbitMQ node and waits until it accepts
// AMQP connections (a few seconds). It fails the test, never skips, when
// RabbitMQ is not installed.
func StartBroker(t testing.TB) *Broker {
	t.Helper()
	bin, err := rabbitBinDir()
	if err != nil {
		t.Fatalf("private RabbitMQ node: %v", err)
	}
	dir := t.TempDir()
	if strings.ContainsRune(dir, '\'') {
		t.Fatalf("private RabbitMQ node: temporary directory %q has a quote in its name", dir)
	}
	amqpPort, err := freePort()
	Must(t, err, "finding a free port")
	distPort, err := freePort()
	Must(t, err, "finding a free port")
	b := &Broker{
		url:  fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort),
		node: UniqueName("tributary-test") + "@localhost",
		dir:  dir,
		bin:  bin,
	}
	Must(t, os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), fmt.Appendf(nil, "listeners.tcp.local = 127.0.0.1:%d\n", amqpPort), 0o644), "writing rabbitmq.conf")
	Must(t, os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644), "writing enabled_plugins")
	Must(t, os.WriteFile(filepath.Join(dir, "rabbitmq-env.conf"), nil, 0o644), "writing rabbitmq-env.conf")

	cmd := exec.Command(filepath.Join(bin, "rabbitmq-server"))
	cmd.Dir = dir
	cmd.Env = append(b.env(),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
		// Erlang distribution on loopback only, like the shared broker.
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	logFile, err := os.Create(filepath.Join(dir, "server.out"))
	Must(t, err, "creating the node's output file")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so the clean-up stops the script and the
	// Erlang VM it starts, and only them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Must(t, cmd.Start(), "starting %s", cmd.Path)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); _ = logFile.Close() }()
	// A test binary that is killed or times out runs no clean-up; the
	// watchdog then stops the node (SIGTERM, SIGKILL after 30 s) once this
	// process is gone, and removes its directory.
	pgid := cmd.Process.Pid
	watchdog := exec.Command("sh", "-c", fmt.Sprintf(`
while kill -0 %[1]d 2>/dev/null; do sleep 1; done
kill -TERM -%[2]d 2>/dev/null
i=0
while kill -0 -%[2]d 2>/dev/null; do
	i=$((i+1))
	if [ $i -gt 30 ]; then kill -KILL -%[2]d 2>/dev/null; fi
	sleep 1
done
rm -rf '%[3]s'`, os.Getpid(), pgid, dir))
	watchdog.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := watchdog.Start(); err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		t.Fatalf("starting the private RabbitMQ node's watchdog: %v", err)
	}
	t.Cleanup(func() {
		b.stop(t, cmd, exited)
		_ = watchdog.Process.Kill()
		_ = watchdog.Wait()
	})

	deadline := time.Now().Add(90 * time.Second)
	for {
		conn, err := amqp.Dial(b.url)
		if err == nil {
			_ = conn.Close()
			return b
		}
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("private RabbitMQ node exited while starting (%v): %s", werr, tail(filepath.Join(dir, "server.out")))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("private RabbitMQ node did not accept connections within 90s: %s", tail(filepath.Join(dir, "server.out")))
		}
		time.Sleep(100 * time.Millisecond) // polling a starting process until a deadline
	}
}

// env is what both the server and rabbitmqctl need to find this node: the
// node name, and a home of its own for the Erlang cookie.
func (b *Broker) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "RABBITMQ_") || strings.HasPrefix(name, "ERL_") || name == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"HOME="+b.dir,
		"RABBITMQ_NODENAME="+b.node,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(b.dir, "rabbitmq-env.conf"),
	)
}

// stop ends the node's process group: SIGTERM (the Erlang VM shuts down
// cleanly on it), then SIGKILL after 30 s. The script may exit before the VM
// does, so it waits until no process of the group is left.
func (b *Broker) stop(t testing.TB, cmd *exec.Cmd, exited chan error) {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			t.Logf("private RabbitMQ node %s did not stop within 30s of SIGTERM; killing it", b.node)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			break
		}
		time.Sleep(50 * time.Millisecond) // polling for the processes' exit until a deadline
	}
	<-exited
}

// URL is the node's AMQP address.
func (b *Broker) URL() string { return b.url }

// Ctl runs rabbitmqctl against the node and returns its output; an error
// fails the test.
func (b *Broker) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.bin, "rabbitmqctl"), append([]string{"-n", b.node}, args...)...)
	cmd.Env = b.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}
