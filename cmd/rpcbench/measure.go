package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// selfCPU is the user and system CPU time this process has used, all
// threads. On this kernel (tick accounting without IRQ time accounting) it
// includes the softirq work — TCP receive processing — that ran while one of
// its threads was on the CPU; work that ksoftirqd does is not counted here
// but shows in machine-wide busy time (cpuTimes).
func selfCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// cpuTimes are CPU times from /proc/stat: of the whole machine, or of one
// CPU.
type cpuTimes struct {
	busy, idle, steal time.Duration
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{busy: a.busy - b.busy, idle: a.idle - b.idle, steal: a.steal - b.steal}
}

// readCPUTimes parses "cpu user nice system idle iowait irq softirq steal",
// the machine's line if cpu < 0, else that CPU's.
func readCPUTimes(cpu int) (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	name := "cpu"
	if cpu >= 0 {
		name = fmt.Sprintf("cpu%d", cpu)
	}
	var f []string
	for line := range strings.Lines(string(b)) {
		if f = strings.Fields(line); len(f) > 0 && f[0] == name {
			break
		}
		f = nil
	}
	if len(f) < 9 {
		return cpuTimes{}, fmt.Errorf("/proc/stat: no usable %q line", name)
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	tick := time.Second / userHZ
	return cpuTimes{
		busy:  time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * tick,
		idle:  time.Duration(v[3]+v[4]) * tick,
		steal: time.Duration(v[7]) * tick,
	}, nil
}

// quietSample is how long one look at the machine's idle time lasts.
const quietSample = 200 * time.Millisecond

// waitQuiet samples the idle fraction of the machine (cpu < 0) or of one CPU
// over quietSample periods until it reaches threshold or maxWait has passed,
// and returns the last sample and whether it was quiet. A threshold of 0 or
// less does not look at all (idle -1).
func waitQuiet(ctx context.Context, cpu int, threshold float64, maxWait time.Duration) (idle float64, quiet bool, err error) {
	if threshold <= 0 {
		return -1, true, nil
	}
	deadline := time.Now().Add(maxWait)
	for {
		a, err := readCPUTimes(cpu)
		if err != nil {
			return 0, false, err
		}
		if err := sleep(ctx, quietSample); err != nil {
			return 0, false, err
		}
		b, err := readCPUTimes(cpu)
		if err != nil {
			return 0, false, err
		}
		d := b.sub(a)
		if total := d.busy + d.idle + d.steal; total > 0 {
			idle = float64(d.idle) / float64(total)
		}
		if idle >= threshold {
			return idle, true, nil
		}
		if time.Now().After(deadline) {
			return idle, false, nil
		}
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kernelRetrans returns the RetransSegs counter of the TCP MIB in this
// process's network namespace.
func kernelRetrans() int64 { return kernelMIB("/proc/self/net/snmp", "Tcp:", "RetransSegs") }

// kernelSpurious returns how many loss recoveries and timeouts the kernel
// found needless and undid, in this process's network namespace: the
// counterpart of gVisor's SpuriousRecovery.
func kernelSpurious() int64 {
	return kernelMIB("/proc/self/net/netstat", "TcpExt:", "TCPFullUndo", "TCPPartialUndo", "TCPDSACKUndo", "TCPLossUndo", "TCPSpuriousRTOs")
}

// kernelMIB sums the named counters of a section of a /proc/net MIB file
// (a line of names, then one of values, each starting with the section);
// -1 when it cannot read one of them.
func kernelMIB(file, section string, names ...string) int64 {
	f, err := os.Open(file)
	if err != nil {
		return -1
	}
	defer f.Close()
	var header []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != section {
			continue
		}
		if header == nil {
			header = fields
			continue
		}
		var sum int64
		for _, want := range names {
			i := slices.Index(header, want)
			if i < 0 || i >= len(fields) {
				return -1
			}
			n, err := strconv.ParseInt(fields[i], 10, 64)
			if err != nil {
				return -1
			}
			sum += n
		}
		return sum
	}
	return -1
}

// pinSelf runs this process on one CPU with GOMAXPROCS 1, so that in pinned
// runs both ends share a CPU the way a single-core deployment would. It
// sets the affinity of every thread (threads started later inherit it) and
// returns a function that restores the previous state.
func pinSelf(cpu int) (restore func(), err error) {
	if cpu < 0 || cpu >= runtime.NumCPU() {
		return nil, fmt.Errorf("pin: CPU %d out of range 0..%d", cpu, runtime.NumCPU()-1)
	}
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return nil, fmt.Errorf("pin: %w", err)
	}
	var one unix.CPUSet
	one.Set(cpu)
	procs := runtime.GOMAXPROCS(1)
	if err := setAffinityAll(&one); err != nil {
		setAffinityAll(&orig)
		runtime.GOMAXPROCS(procs)
		return nil, err
	}
	return func() {
		setAffinityAll(&orig)
		runtime.GOMAXPROCS(procs)
	}, nil
}

// setAffinityAll sets the affinity of every thread of the process. Twice:
// a thread created during the first pass by a thread not yet switched
// inherits the old mask.
func setAffinityAll(set *unix.CPUSet) error {
	for range 2 {
		tids, err := filepath.Glob("/proc/self/task/*")
		if err != nil {
			return err
		}
		for _, t := range tids {
			tid, err := strconv.Atoi(filepath.Base(t))
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pin: thread %d: %w", tid, err)
			}
		}
	}
	return nil
}
