package redisurl

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in        string
		addrs     []string
		user, pw  string
		tls       bool
		masterSet string
	}{
		{in: "127.0.0.1:7000", addrs: []string{"127.0.0.1:7000"}},
		{in: ":7000, :7001", addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}},
		{in: "redis://127.0.0.1:7000?addr=127.0.0.1:7001", addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}},
		{in: "rediss://ops:secret@127.0.0.1:7000", addrs: []string{"127.0.0.1:7000"}, user: "ops", pw: "secret", tls: true},
		{in: "redis://127.0.0.1:26379?master_set=mymaster", addrs: []string{"127.0.0.1:26379"}, masterSet: "mymaster"},
	}
	for _, c := range cases {
		opt, err := Parse(c.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.in, err)
		}
		if strings.Join(opt.InitAddress, ",") != strings.Join(c.addrs, ",") {
			t.Errorf("Parse(%q) addresses %v, want %v", c.in, opt.InitAddress, c.addrs)
		}
		if opt.Username != c.user || opt.Password != c.pw || (opt.TLSConfig != nil) != c.tls || opt.Sentinel.MasterSet != c.masterSet {
			t.Errorf("Parse(%q) = user %q password %q tls %v master_set %q", c.in, opt.Username, opt.Password, opt.TLSConfig != nil, opt.Sentinel.MasterSet)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                            "-redis is empty",
		"localhost":                   `"localhost" is not host:port`,
		"ftp://x:1":                   "invalid URL scheme",
		"127.0.0.1:7000,":             "-redis",
		"redis://[::1":                "-redis",
		"redis://ops:secret@h:1/nodb": "ops:xxxxx@",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(%q) error shows the password: %v", in, err)
		}
	}
}
