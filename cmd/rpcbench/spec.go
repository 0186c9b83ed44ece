package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Tests.
const (
	testRR     = "rr"
	testStream = "stream"
	testCRR    = "crr"
)

// presets are named request/response sizes.
var presets = map[string][2]int{
	"4k-write": {4096, 64}, // a 4 KiB write: the data goes in the request
	"4k-read":  {64, 4096}, // a 4 KiB read: the data comes back
}

// testSpec says what a client runs. Written as a case string:
//
//	rr[/PRESET|/REQxRESP][/cCONNS][/dDEPTH]   e.g. rr/4k-write/c64/d8, rr/1024x1024
//	crr[/PRESET|/REQxRESP][/cCONNS]           connect, request, response, close
//	stream[/cCONNS]                           bulk transfer, client to server
//
// Defaults: preset 4k-write, 1 connection, depth 1.
type testSpec struct {
	Test   string `json:"test"`
	Preset string `json:"preset,omitempty"`
	Req    int    `json:"req"`
	Resp   int    `json:"resp"`
	Conns  int    `json:"conns"`
	Depth  int    `json:"depth"`
}

func parseTest(s string) (testSpec, error) {
	parts := strings.Split(s, "/")
	t := testSpec{Test: parts[0], Preset: "4k-write", Conns: 1, Depth: 1}
	switch t.Test {
	case testRR, testCRR, testStream:
	default:
		return t, fmt.Errorf("case %q: unknown test %q (rr, crr or stream)", s, t.Test)
	}
	bad := func(p string) (testSpec, error) { return t, fmt.Errorf("case %q: cannot parse %q", s, p) }
	for _, p := range parts[1:] {
		if size, ok := presets[p]; ok && t.Test != testStream {
			t.Preset, t.Req, t.Resp = p, size[0], size[1]
			continue
		}
		if req, resp, ok := strings.Cut(p, "x"); ok && t.Test != testStream {
			var err1, err2 error
			t.Req, err1 = strconv.Atoi(req)
			t.Resp, err2 = strconv.Atoi(resp)
			if err1 != nil || err2 != nil {
				return bad(p)
			}
			t.Preset = ""
			continue
		}
		if len(p) < 2 {
			return bad(p)
		}
		n, err := strconv.Atoi(p[1:])
		if err != nil || n < 1 {
			return bad(p)
		}
		switch {
		case p[0] == 'c':
			t.Conns = n
		case p[0] == 'd' && t.Test == testRR:
			t.Depth = n
		default:
			return bad(p)
		}
	}
	if t.Preset != "" {
		size := presets[t.Preset]
		t.Req, t.Resp = size[0], size[1]
	}
	if t.Test == testStream {
		t.Preset, t.Req, t.Resp = "", 0, 0
	} else if t.Req < seqLen || t.Resp < seqLen || t.Req > maxMsgLen || t.Resp > maxMsgLen {
		return t, fmt.Errorf("case %q: message sizes must be %d..%d bytes", s, seqLen, maxMsgLen)
	}
	if t.Conns > 4096 || t.Depth > 4096 {
		return t, fmt.Errorf("case %q: at most 4096 connections and depth 4096", s)
	}
	return t, nil
}

// String returns the canonical case string.
func (t testSpec) String() string {
	s := t.Test
	switch {
	case t.Test == testStream:
	case t.Preset != "":
		s += "/" + t.Preset
	default:
		s += fmt.Sprintf("/%dx%d", t.Req, t.Resp)
	}
	s += fmt.Sprintf("/c%d", t.Conns)
	if t.Test == testRR {
		s += fmt.Sprintf("/d%d", t.Depth)
	}
	return s
}

// Title describes the case in words.
func (t testSpec) Title() string {
	conns := plural(t.Conns, "connection")
	switch t.Test {
	case testStream:
		return fmt.Sprintf("stream, %s, client to server", conns)
	case testCRR:
		return fmt.Sprintf("crr %s (%d B request, %d B response), %s in parallel", t.sizeName(), t.Req, t.Resp, conns)
	}
	return fmt.Sprintf("rr %s (%d B request, %d B response), %s × depth %d (%d outstanding)", t.sizeName(), t.Req, t.Resp, conns, t.Depth, t.Conns*t.Depth)
}

func (t testSpec) sizeName() string {
	if t.Preset != "" {
		return t.Preset
	}
	return fmt.Sprintf("%dx%d", t.Req, t.Resp)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// modeSpec is a mode with its options, written
// MODE[:mtu=N][:poll=P][:ring=N][:ack=off][:procs=N][:queues=N][:pin], e.g.
// p2p-pipe:mtu=65535 or k2k-veth:pin.
type modeSpec struct {
	Name string `json:"name"`
	MTU  int    `json:"mtu,omitempty"`  // 0: the -mtu flag
	Poll string `json:"poll,omitempty"` // "": the -poll flag
	Ring int    `json:"ring,omitempty"` // pipe ring size in frames; 0: linktest's default (1024)
	// ACKOff turns the polarnet ends' ACK filter off
	// (Config.ACK.DisableFilter).
	ACKOff bool `json:"ack_off,omitempty"`
	// Procs is GOMAXPROCS of the processes of polarnet ends; 0: Go's
	// default (the CPUs). Pinned rows run with 1 whatever it says.
	Procs int `json:"procs,omitempty"`
	// Queues is the TAP device's or the pipe's queue pairs, so a polarnet
	// stack's shards (TAP and pipe modes); 0: the link's default, as a user
	// gets it (TAP: a queue per CPU the end's process may use; the pipe:
	// one).
	Queues int  `json:"queues,omitempty"`
	Pin    bool `json:"pin,omitempty"`
}

func parseMode(s string) (modeSpec, error) {
	parts := strings.Split(s, ":")
	m := modeSpec{Name: parts[0]}
	if _, ok := modes[m.Name]; !ok {
		return m, fmt.Errorf("mode %q: unknown (have %s)", m.Name, strings.Join(modeNames(), ", "))
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "pin":
			m.Pin = true
		case "mtu":
			n, err := strconv.Atoi(v)
			if err != nil || n < 576 || n > 65535 {
				return m, fmt.Errorf("mode %q: mtu must be 576..65535", s)
			}
			m.MTU = n
		case "ring":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1<<16 {
				return m, fmt.Errorf("mode %q: ring must be 1..65536 frames", s)
			}
			m.Ring = n
		case "poll":
			if _, err := parsePoll(v); err != nil {
				return m, fmt.Errorf("mode %q: %w", s, err)
			}
			m.Poll = v
		case "ack":
			if v != "on" && v != "off" {
				return m, fmt.Errorf("mode %q: ack must be on or off", s)
			}
			m.ACKOff = v == "off"
		case "procs":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1024 {
				return m, fmt.Errorf("mode %q: procs must be 1..1024", s)
			}
			m.Procs = n
		case "queues":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 16 {
				return m, fmt.Errorf("mode %q: queues must be 1..16", s)
			}
			m.Queues = n
		default:
			return m, fmt.Errorf("mode %q: unknown option %q (mtu=N, poll=P, ring=N, ack=off, procs=N, queues=N, pin)", s, p)
		}
	}
	if def := modes[m.Name]; (m.ACKOff || m.Procs > 0) && def.client != "polarnet" && def.server != "polarnet" {
		return m, fmt.Errorf("mode %q: ack and procs apply to polarnet ends; %s has none", s, m.Name)
	}
	if m.Queues > 0 && !strings.HasSuffix(m.Name, "-tap") && !strings.HasSuffix(m.Name, "-pipe") {
		return m, fmt.Errorf("mode %q: queues applies to the TAP and pipe modes", s)
	}
	return m, nil
}

func (m modeSpec) String() string {
	s := m.Name
	if m.MTU != 0 {
		s += fmt.Sprintf(":mtu=%d", m.MTU)
	}
	if m.Poll != "" {
		s += ":poll=" + m.Poll
	}
	if m.Ring != 0 {
		s += fmt.Sprintf(":ring=%d", m.Ring)
	}
	if m.ACKOff {
		s += ":ack=off"
	}
	if m.Procs != 0 {
		s += fmt.Sprintf(":procs=%d", m.Procs)
	}
	if m.Queues != 0 {
		s += fmt.Sprintf(":queues=%d", m.Queues)
	}
	if m.Pin {
		s += ":pin"
	}
	return s
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	return slices.DeleteFunc(strings.Split(s, ","), func(x string) bool { return strings.TrimSpace(x) == "" })
}
