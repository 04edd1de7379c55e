package redisserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSServer is a redis-server that also listens for TLS connections.
type TLSServer struct {
	*Server
	// TLSAddr is the host:port of the TLS listener; Addr stays a plain
	// listener for setup and inspection with Command.
	TLSAddr string
	// ClientConfig trusts the throwaway CA that signed the server's
	// certificate (for 127.0.0.1); it presents no client certificate.
	ClientConfig *tls.Config
}

// StartTLS starts a standalone redis-server with a TLS port beside its plain
// one. A throwaway CA and a server certificate for 127.0.0.1 are generated
// for the test; clients need not present a certificate (tls-auth-clients
// no). extraArgs are appended to the command line.
func StartTLS(t testing.TB, extraArgs ...string) *TLSServer {
	t.Helper()
	certDir := t.TempDir()
	pool, err := writeCerts(certDir)
	if err != nil {
		t.Fatalf("redisserver: certificates: %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		tlsPort, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		args := append([]string{
			"--tls-port", strconv.Itoa(tlsPort),
			"--tls-cert-file", filepath.Join(certDir, "server.crt"),
			"--tls-key-file", filepath.Join(certDir, "server.key"),
			"--tls-ca-cert-file", filepath.Join(certDir, "ca.crt"),
			"--tls-auth-clients", "no",
		}, extraArgs...)
		bin, err := Binary()
		if err != nil {
			unavailable(t, "redis-server not found: %v", err)
		}
		port, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		s, err := startServer(bin, port, args)
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(s.Stop)
		return &TLSServer{
			Server:       s,
			TLSAddr:      net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort)),
			ClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}
	}
	unavailable(t, "cannot start redis-server with TLS: %v", lastErr)
	return nil
}

// writeCerts writes ca.crt, server.crt and server.key into dir and returns
// a pool holding the CA.
func writeCerts(dir string) (*x509.CertPool, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	for name, block := range map[string]*pem.Block{
		"ca.crt":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.crt": {Type: "CERTIFICATE", Bytes: leafDER},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, nil
}
