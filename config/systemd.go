package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// listenFDsStart is SD_LISTEN_FDS_START: systemd passes sockets from fd 3 up.
const listenFDsStart = 3

// inheritedListeners implements socket activation. Upstream (built with
// libsystemd, as Debian ships it) takes the first socket systemd passes and
// ignores the rest; beanpole serves them all (a unit may listen on several
// addresses), so one socket behaves exactly as upstream. -l/-p are ignored
// with upstream's warnings. As upstream, the first socket (fd 3) must be a
// listening TCP or UNIX stream socket; a later one that is not (a unit may
// also pass a datagram socket or a FIFO, which upstream never looks at) is
// closed and skipped with a warning, so that everything upstream accepts
// is accepted. It returns no listeners and a nil error when nothing was
// passed to us.
func inheritedListeners(cfg *Config, log zerolog.Logger) ([]net.Listener, string, error) {
	n, err := listenFDs()
	if err != nil {
		return nil, "", fmt.Errorf("sd_listen_fds: %w", err)
	}
	if n == 0 {
		return nil, "", nil
	}

	// Upstream prints these while parsing flags; they come here because
	// only Listen consults the environment. Same text, printed once per
	// option with its final value.
	if cfg.addrGiven {
		log.Warn().Msgf("inherited listen fd; ignoring option: -l %s", cfg.ListenAddr)
	}
	if cfg.portGiven {
		log.Warn().Msgf("inherited listen fd; ignoring option: -p %s", cfg.Port)
	}

	var lns []net.Listener
	var descs []string
	for fd := listenFDsStart; fd < listenFDsStart+n; fd++ {
		ln, err := inheritedListener(fd)
		if err != nil {
			if fd == listenFDsStart {
				return nil, "", err
			}
			log.Warn().Err(err).Msgf("inherited fd %d is not served", fd)
			continue
		}
		lns = append(lns, ln)
		desc := ln.Addr().String()
		if ln.Addr().Network() == "unix" {
			desc = "unix:" + desc
		}
		descs = append(descs, fmt.Sprintf("fd %d %s", fd, desc))
	}
	return lns, "systemd " + strings.Join(descs, ", "), nil
}

// inheritedListener takes over the listening socket systemd passed as fd.
// The descriptor is closed in every case: on success the listener holds
// its own duplicate.
func inheritedListener(fd int) (net.Listener, error) {
	if err := checkListeningStream(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// net.FileListener works on a dup; closing the original keeps a single
	// descriptor for the socket, so closing the listener really closes it.
	f := os.NewFile(uintptr(fd), "systemd-listen-fd-"+strconv.Itoa(fd))
	ln, err := net.FileListener(f)
	f.Close()
	return ln, err
}

// listenFDs is sd_listen_fds(1): it reports how many sockets systemd passed
// to this very process, marks them close-on-exec, and always removes
// LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES from the environment so no
// child process mistakes them for its own. As in libsystemd, a LISTEN_PID
// for another process means "none", while a malformed value is an error.
func listenFDs() (n int, err error) {
	defer func() {
		os.Unsetenv("LISTEN_PID")
		os.Unsetenv("LISTEN_FDS")
		os.Unsetenv("LISTEN_FDNAMES")
	}()

	pidText, ok := os.LookupEnv("LISTEN_PID")
	if !ok {
		return 0, nil
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("LISTEN_PID=%q: %w", pidText, syscall.EINVAL)
	}
	if pid != os.Getpid() {
		return 0, nil
	}

	fdsText, ok := os.LookupEnv("LISTEN_FDS")
	if !ok {
		return 0, nil
	}
	n, err = strconv.Atoi(fdsText)
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("LISTEN_FDS=%q: %w", fdsText, syscall.EINVAL)
	}

	for fd := listenFDsStart; fd < listenFDsStart+n; fd++ {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			return 0, fmt.Errorf("fd %d: %w", fd, err)
		}
		if flags&unix.FD_CLOEXEC == 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
				return 0, fmt.Errorf("fd %d: %w", fd, err)
			}
		}
	}
	return n, nil
}

var errNotListeningStream = errors.New("inherited fd is not a TCP or UNIX listening socket")

// checkListeningStream is upstream's sd_is_socket_inet(fd, 0, SOCK_STREAM,
// 1, 0) || sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0): a listening
// stream socket of family IPv4, IPv6 or UNIX.
func checkListeningStream(fd int) error {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("%w (fd %d: %v)", errNotListeningStream, fd, err)
	}
	switch sa.(type) {
	case *unix.SockaddrInet4, *unix.SockaddrInet6, *unix.SockaddrUnix:
	default:
		return fmt.Errorf("%w (fd %d: wrong address family)", errNotListeningStream, fd)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("%w (fd %d: %v)", errNotListeningStream, fd, err)
	}
	if typ != unix.SOCK_STREAM {
		return fmt.Errorf("%w (fd %d: not SOCK_STREAM)", errNotListeningStream, fd)
	}
	listening, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return fmt.Errorf("%w (fd %d: %v)", errNotListeningStream, fd, err)
	}
	if listening == 0 {
		return fmt.Errorf("%w (fd %d: not listening)", errNotListeningStream, fd)
	}
	return nil
}
