package config

import (
	"net"
	"os"
	"strings"
)

// SdNotify sends state to systemd's notification socket ($NOTIFY_SOCKET,
// set for a Type=notify service), as sd_notify(3) does: READY=1 once the
// binlog is replayed and clients are served, STOPPING=1 at a graceful
// stop. Without the variable it does nothing; a failure is only reported,
// since the server works regardless.
func SdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if strings.HasPrefix(path, "@") { // an abstract socket
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
