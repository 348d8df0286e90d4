package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// hosts decides which Host headers the dashboard answers. A browser sends
// the name it resolved, so a page on another site that rebinds its own
// name to the dashboard's address (DNS rebinding) sends that name: the
// dashboard refuses it before reading anything. It answers the address the
// connection arrived on, the loopback names on that port, and the names an
// operator allowed (Config.AllowedHosts).
type hosts struct {
	any   bool            // "*": every host is allowed
	names map[string]bool // allowed on any port
	addrs map[string]bool // "name:port", allowed on that port only
}

func newHosts(allowed []string) (hosts, error) {
	h := hosts{names: map[string]bool{}, addrs: map[string]bool{}}
	for _, a := range allowed {
		a = strings.TrimSpace(a)
		if a == "*" {
			h.any = true
			continue
		}
		name, port, err := net.SplitHostPort(a)
		if err != nil {
			name, port = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]"), ""
		}
		name = canonHost(name)
		switch {
		case name == "" || strings.ContainsAny(name, "/ @?#*,") || strings.Contains(a, "://"):
			return h, fmt.Errorf("dashboard: allowed host %q is not a host name: give a name or address as a browser's Host header carries it, like dash.example.com or 10.0.0.5:8080 (a port only when it must match), or * to allow every host", a)
		case port != "" && !validPort(port):
			return h, fmt.Errorf("dashboard: allowed host %q has the port %q, not a number from 1 to 65535", a, port)
		case port != "":
			h.addrs[net.JoinHostPort(name, port)] = true
		default:
			h.names[name] = true
		}
	}
	return h, nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// canonHost is a host name as compared: lower case, no trailing dot, no
// brackets around an IPv6 address.
func canonHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")), ".")
}

// allows answers whether r's Host is one the dashboard answers.
func (h hosts) allows(r *http.Request) bool {
	if h.any {
		return true
	}
	name, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		name, port = r.Host, "80"
		if r.TLS != nil {
			port = "443"
		}
	}
	name = canonHost(name)
	if h.names[name] || h.addrs[net.JoinHostPort(name, port)] {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok || strconv.Itoa(local.Port) != port {
		return false
	}
	if name == "localhost" {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && (ip.Equal(local.IP) || ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback))
}

// misdirected answers 421 to a request whose Host the dashboard does not
// answer, saying which and how to allow it. It reads nothing from Redis.
func misdirected(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if len(host) > 200 {
		host = host[:200] + "..."
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprintf(w, "fenceq dashboard: refused the Host %q. The dashboard (and workerd run's /metrics) answers only to the address it listens on and to localhost on that port, "+
		"so that no other site's page can read it through a name pointed at this address (DNS rebinding). "+
		"If you reach it by this name (a proxy, a DNS name, a forwarded port), allow it: start workerd with --ui-allowed-hosts NAME[,NAME...] "+
		"(or FENCEQ_UI_ALLOWED_HOSTS; ui_allowed_hosts in workerd run's config). Nothing was read or changed.\n", host)
}
