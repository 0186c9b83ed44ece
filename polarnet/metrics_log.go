package polarnet

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Logging on the packet path: an event may repeat millions of times a
// second (a device gone, a full ring), so every kind of event passes a
// token bucket of its own per shard before it reaches the logger.
const (
	// logBurst events of a kind may be logged at once, then logRate per
	// second; the rest are counted, and the next record logged says how
	// many were suppressed.
	logBurst = 5
	logRate  = 1.0
	// dropLogInterval is how often a working poller looks for new drops.
	dropLogInterval = time.Second
)

type logKind uint8

const (
	logPollError logKind = iota // ReadBurst failed
	logTxError                  // WriteBurst failed
	logDrops                    // frames dropped since the last look
	logKinds
)

// shardLogs are a shard's rate limits, one per event kind.
type shardLogs struct {
	buckets    [logKinds]tokenBucket
	suppressed atomic.Uint64
}

// tokenBucket allows logBurst events, refilled at logRate per second.
type tokenBucket struct {
	mu         sync.Mutex
	tokens     float64
	last       int64 // clock() of the last refill; 0: never used (full)
	suppressed uint64
}

// allow takes a token at time now. It reports whether the event may be
// logged and, if so, how many were suppressed since the last one logged.
func (b *tokenBucket) allow(now int64) (bool, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == 0 {
		b.tokens = logBurst
	} else {
		b.tokens = min(logBurst, b.tokens+float64(now-b.last)/float64(time.Second)*logRate)
	}
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// logger returns the stack's logger: Config.Logger, else slog.Default()
// (looked up at each use, so a later slog.SetDefault applies).
func (s *Stack) logger() *slog.Logger {
	if l := s.cfg.Logger; l != nil {
		return l
	}
	return slog.Default()
}

// logEvent logs an event of the given kind unless its bucket is empty.
func (s *shard) logEvent(kind logKind, level slog.Level, msg string, args ...any) {
	logs := &s.stats.m.logs
	ok, suppressed := logs.buckets[kind].allow(clock())
	if !ok {
		logs.suppressed.Add(1)
		return
	}
	l := s.owner.logger()
	if !l.Enabled(context.Background(), level) {
		return
	}
	args = append(args, slog.Int("shard", s.id), slog.String("link", s.owner.cfg.Link.Info().Name))
	if suppressed > 0 {
		args = append(args, slog.Uint64("suppressed", suppressed))
	}
	l.Log(context.Background(), level, msg, args...)
}

func (s *shard) logPollError(err error) {
	s.logEvent(logPollError, slog.LevelWarn, "polarnet: link read failed", slog.Any("err", err))
}

func (s *shard) logTxError(err error, dropped int) {
	s.logEvent(logTxError, slog.LevelWarn, "polarnet: link write failed", slog.Any("err", err), slog.Int("dropped", dropped))
}

// dropCounts are the shard's drop counters a burst of drops is told by.
type dropCounts struct {
	badFrame, oversize, checksum, noDispatcher, martian, shed, handoff, txRingFull, txErrors uint64
}

func (s *shard) drops() dropCounts {
	c := &s.stats
	return dropCounts{
		badFrame:     c.rxBadFrame.Load(),
		oversize:     c.rxOversize.Load(),
		checksum:     c.rxChecksum.Load(),
		noDispatcher: c.rxNoDispatcher.Load(),
		martian:      c.rxMartian.Load(),
		shed:         c.rxShed.Load(),
		handoff:      c.handoffDrop.Load(),
		txRingFull:   c.txRingFull.Load(),
		txErrors:     c.txErrors.Load(),
	}
}

// checkDrops logs the drops since the last check, if any; the poller calls
// it at most once per dropLogInterval, from a working iteration.
func (s *shard) checkDrops(now int64) {
	m := &s.stats.m
	cur := s.drops()
	prev := m.lastDrops
	m.lastDrops, m.lastDropCheck = cur, now
	if cur == prev {
		return
	}
	var args []any
	add := func(key string, a, b uint64) {
		if a > b {
			args = append(args, slog.Uint64(key, a-b))
		}
	}
	add("bad_frame", cur.badFrame, prev.badFrame)
	add("oversize", cur.oversize, prev.oversize)
	add("checksum", cur.checksum, prev.checksum)
	add("no_dispatcher", cur.noDispatcher, prev.noDispatcher)
	add("martian", cur.martian, prev.martian)
	add("shed", cur.shed, prev.shed)
	add("handoff_ring_full", cur.handoff, prev.handoff)
	add("tx_ring_full", cur.txRingFull, prev.txRingFull)
	add("tx_error", cur.txErrors, prev.txErrors)
	if len(args) == 0 {
		return
	}
	// Martians (DAD probes from ::, say) and frames before the NIC was
	// attached are routine: debug. Everything else means trouble.
	level := slog.LevelDebug
	if (cur.martian-prev.martian)+(cur.noDispatcher-prev.noDispatcher) < sum(cur)-sum(prev) {
		level = slog.LevelWarn
	}
	s.logEvent(logDrops, level, "polarnet: frames dropped", args...)
}

func sum(d dropCounts) uint64 {
	return d.badFrame + d.oversize + d.checksum + d.noDispatcher + d.martian + d.shed + d.handoff + d.txRingFull + d.txErrors
}
