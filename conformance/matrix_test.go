package conformance

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMatrixOutput(t *testing.T) {
	m := NewMatrix("tap")
	m.Add(Result{Scenario: "b", Direction: StackClient, Link: "tap", Status: Running})
	m.Add(Result{Scenario: "b", Direction: KernelKernel, Link: "tap", Status: Pass, Duration: 1500 * time.Millisecond})
	m.Add(Result{Scenario: "a", Direction: KernelKernel, Link: "tap", Status: Pass, Duration: time.Second})
	m.Add(Result{Scenario: "b", Direction: StackClient, Link: "tap", Status: Fail, Duration: 2 * time.Second, Reason: "x = \"1\" | y", Pcap: "/tmp/p/b_p2k.pcap"})
	m.Add(Result{Scenario: "a", Direction: StackServer, Link: "tap", Status: KnownFail, Known: "engine bug", Reason: "not run"})
	m.Add(Result{Scenario: "a", Direction: StackStack, Link: "tap", Status: Pass, Duration: time.Second, Known: "engine bug", Reason: "passed"})
	counts := m.Counts()
	assert.Equal(t, map[Status]int{Pass: 3, Fail: 1, KnownFail: 1}, counts, "the running marker was replaced")

	var md bytes.Buffer
	require.NoError(t, m.WriteMarkdown(&md))
	lines := strings.Split(md.String(), "\n")
	assert.Contains(t, md.String(), "| b | ✅ 1.50s | ❌ 2.00s [1] | — | — |", "scenarios keep their first order")
	assert.Contains(t, md.String(), "| a | ✅ 1.00s | — | ⚠️ not run [2] | ✅ 1.00s [2] |", "one note per bug")
	assert.Less(t, strings.Index(md.String(), "| b |"), strings.Index(md.String(), "| a |"))
	assert.Contains(t, md.String(), `1. unexpected failure: x = "1" \| y`)
	assert.Contains(t, md.String(), "2. engine bug\n")
	assert.Contains(t, md.String(), `| b | p2k | x = "1" \| y | `+"`b_p2k.pcap`"+` |`)
	assert.Contains(t, md.String(), "| a | k2p | not run |  |")
	assert.Contains(t, lines[2], "kernel ↔ kernel (reference)")

	var js bytes.Buffer
	require.NoError(t, m.WriteJSON(&js))
	var back struct {
		Link    string
		Results []Result
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	assert.Equal(t, "tap", back.Link)
	require.Len(t, back.Results, 5)
	assert.Equal(t, "b", back.Results[0].Scenario)
	assert.Equal(t, KernelKernel, back.Results[0].Direction, "reference first")
	assert.Equal(t, StackClient, back.Results[1].Direction)

	dir := t.TempDir()
	mdPath, jsPath, err := m.WriteFiles(filepath.Join(dir, "out"))
	require.NoError(t, err)
	for _, p := range []string{mdPath, jsPath} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.NotZero(t, st.Size())
	}
}

func TestLookup(t *testing.T) {
	k, err := Lookup("tap")
	require.NoError(t, err)
	assert.Equal(t, "tap", k.Name())
	_, err = Lookup("carrier-pigeon")
	assert.ErrorContains(t, err, `unknown link "carrier-pigeon" (registered: `)
}

func TestClassify(t *testing.T) {
	assert.Equal(t, "ok", classify(nil))
	assert.Equal(t, "deadline exceeded", classify(os.ErrDeadlineExceeded))
}

func TestUnpredictable(t *testing.T) {
	c, s := unpredictable([]uint32{10, 20, 30, 40}, 32)
	assert.True(t, c)
	assert.True(t, s)
	c, s = unpredictable([]uint32{10, 3e9, 7, 1e9}, 32)
	assert.False(t, c)
	assert.False(t, s)
	c, _ = unpredictable([]uint32{60000, 60002, 60008, 60010}, 16)
	assert.False(t, c)
}
