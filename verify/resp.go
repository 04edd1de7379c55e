package verify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// respConn is a minimal RESP2 client: one connection, one command at a
// time. It keeps every reply kind apart (status and bulk strings, nil and
// errors inside arrays), which general-purpose clients blur.
type respConn struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func dialRESP(ctx context.Context, addr string) (*respConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &dialError{addr: addr, err: err}
	}
	return &respConn{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}, nil
}

// dialError is a failure to connect to addr. Its message names the address
// once and the cause without the net package's "dial tcp ADDR:" prefix.
type dialError struct {
	addr string
	err  error
}

func (e *dialError) Error() string {
	cause := e.err
	var op *net.OpError
	if errors.As(cause, &op) && op.Err != nil {
		cause = op.Err
		var sys *os.SyscallError
		if errors.As(cause, &sys) {
			cause = sys.Err
		}
	}
	return fmt.Sprintf("verify: cannot connect to %s: %v", e.addr, cause)
}

func (e *dialError) Unwrap() error { return e.err }

// do sends one command and reads its reply. Error replies are returned as
// Replies of KindError; the Go error is for I/O and protocol failures.
func (c *respConn) do(ctx context.Context, args ...string) (Reply, error) {
	if len(args) == 0 {
		return Reply{}, errors.New("verify: empty command")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.conn.SetDeadline(deadline)
	writeCommand(c.w, args)
	if err := c.w.Flush(); err != nil {
		return Reply{}, fmt.Errorf("verify: send %s: %w", args[0], err)
	}
	r, err := readReply(c.r, 0)
	if err != nil {
		return Reply{}, fmt.Errorf("verify: read reply to %s: %w", args[0], err)
	}
	return r, nil
}

func (c *respConn) close() error { return c.conn.Close() }

func writeCommand(w *bufio.Writer, args []string) {
	w.WriteString("*")
	w.WriteString(strconv.Itoa(len(args)))
	w.WriteString("\r\n")
	for _, a := range args {
		w.WriteString("$")
		w.WriteString(strconv.Itoa(len(a)))
		w.WriteString("\r\n")
		w.WriteString(a)
		w.WriteString("\r\n")
	}
}

// errProtocol means the server sent something that is not RESP2.
var errProtocol = errors.New("verify: malformed RESP reply")

const maxBulk = 512 << 20

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return "", errProtocol
	}
	return line[:len(line)-2], nil
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader, depth int) (Reply, error) {
	if depth > 1000 {
		return Reply{}, errProtocol
	}
	line, err := readLine(r)
	if err != nil {
		return Reply{}, err
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return Status(body), nil
	case '-':
		return Err(body), nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return Reply{}, errProtocol
		}
		return Int(n), nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulk {
			return Reply{}, errProtocol
		}
		if n < 0 {
			return Nil(), nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Reply{}, err
		}
		return Bulk(string(buf[:n])), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > 1<<24 {
			return Reply{}, errProtocol
		}
		if n < 0 {
			return Nil(), nil
		}
		elems := make([]Reply, n)
		for i := range elems {
			if elems[i], err = readReply(r, depth+1); err != nil {
				return Reply{}, err
			}
		}
		return Array(elems...), nil
	}
	return Reply{}, errProtocol
}
