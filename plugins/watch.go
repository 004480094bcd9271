package plugins

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions configures [Registry.Watch].
type WatchOptions struct {
	// Debounce is how long a file must stay unchanged after an event
	// before it is loaded, so that a file being written is not loaded
	// half-way. Default: 0, which means 100ms.
	Debounce time.Duration
}

// DirWatcher keeps a tenant's modules in sync with a directory: NAME.wasm
// (with its sidecar NAME.json and its signature NAME.wasm.minisig, if
// any) is module NAME. A new or changed
// file is compiled and described in the background and swapped in
// atomically; a file that fails is rejected with a logged reason while the
// previous version keeps serving; a removed file unregisters its module.
// Write files atomically (write elsewhere, then rename into the directory)
// for the fastest swaps; partial writes are tolerated (debounced, and a
// failed load is retried on the next event). Where the tenant requires
// signatures, write the module first, then its signature: a module whose
// signature is missing or does not match gets one Debounce more for it
// to come before it is refused.
type DirWatcher struct {
	reg      *Registry
	tenant   string
	dir      string
	debounce time.Duration
	fsw      *fsnotify.Watcher

	mu      sync.Mutex
	pending map[string]time.Time // module name → time of its last event
	loaded  map[string]string    // module name → hash of wasm+sidecar last handled
	sigWait map[string]bool      // module name → its signature did not match once: wait one Debounce more
	wake    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// Watch loads every module of dir for tenant, then keeps watching it until
// ctx is done or the DirWatcher is closed. The modules load side by side
// (at most max(4, GOMAXPROCS) at once), so Watch returns in about the time
// of the slowest of them, not the sum; they register in the order of their
// names, as if loaded one by one. Modules that fail to load are rejected
// (logged, reported to OnChange) without failing Watch; Watch fails only
// when dir cannot be watched.
func (r *Registry) Watch(ctx context.Context, tenant, dir string, opts WatchOptions) (*DirWatcher, error) {
	if opts.Debounce == 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := fsw.Add(dir); err != nil {
		fsw.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &DirWatcher{
		reg:      r,
		tenant:   tenant,
		dir:      dir,
		debounce: opts.Debounce,
		fsw:      fsw,
		pending:  map[string]time.Time{},
		loaded:   map[string]string{},
		sigWait:  map[string]bool{},
		wake:     make(chan struct{}, 1),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	// The initial scan, synchronous: the directory's modules are served
	// when Watch returns.
	w.syncAll(ctx, w.scan())
	if !r.addWatcher(w) {
		cancel()
		fsw.Close()
		return nil, &PluginError{Plugin: dir, Export: "watch", Err: ErrClosed}
	}
	events := make(chan struct{})
	go func() {
		defer close(events)
		w.events(ctx)
	}()
	go func() {
		defer close(w.done)
		w.work(ctx)
		<-events
		fsw.Close()
	}()
	return w, nil
}

// Close stops watching; the modules loaded stay registered. A load in
// progress is stopped (its compile or instantiation interrupted) and
// Close waits for it. [Registry.Close] closes the registry's watchers.
func (w *DirWatcher) Close() error {
	w.cancel()
	<-w.done
	w.reg.forgetWatcher(w)
	return nil
}

// Dir returns the directory watched.
func (w *DirWatcher) Dir() string { return w.dir }

// scan lists the module names of the directory.
func (w *DirWatcher) scan() []string {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		w.reg.log.Warn("plugins: scanning the plugin directory", "dir", w.dir, "err", err)
		return nil
	}
	var names []string
	for _, e := range entries {
		if name, ok := w.moduleOf(e.Name()); ok && strings.HasSuffix(e.Name(), ".wasm") {
			names = append(names, name)
		}
	}
	return names
}

// moduleOf maps a file name to its module name: NAME.wasm, NAME.json and
// NAME.wasm.minisig. Hidden files (editors' and atomic writers'
// temporaries) are ignored.
func (w *DirWatcher) moduleOf(file string) (string, bool) {
	if strings.HasPrefix(file, ".") {
		return "", false
	}
	for _, ext := range []string{".wasm" + SignatureSuffix, ".wasm", ".json"} {
		if name, ok := strings.CutSuffix(file, ext); ok && validModuleName(name) {
			return name, true
		}
	}
	return "", false
}

// events turns file events into pending module names.
func (w *DirWatcher) events(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if name, ok := w.moduleOf(filepath.Base(ev.Name)); ok {
				w.mark(name)
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.reg.log.Warn("plugins: watching the plugin directory", "dir", w.dir, "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: look at everything again.
				for _, name := range w.scan() {
					w.mark(name)
				}
				w.mu.Lock()
				for name := range w.loaded {
					w.pending[name] = time.Now()
				}
				w.mu.Unlock()
			}
		}
	}
}

func (w *DirWatcher) mark(name string) {
	w.mu.Lock()
	w.pending[name] = time.Now()
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// work loads the modules whose files settled. Files that settle within a
// Debounce of the first of them load together, as one batch (see
// syncAll): the files of a deployment copied in one after the other, or a
// rescan of the whole directory, load side by side.
func (w *DirWatcher) work(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := w.takeDue(time.Now())
		if ctx.Err() != nil {
			return
		}
		if len(due) > 0 {
			w.syncAll(ctx, due)
			continue
		}
		if next < 0 {
			next = time.Hour
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// takeDue returns the batch of pending modules to load now, or nothing and
// how long to wait (-1: nothing pending). A module is due a Debounce after
// its last event; once the first is due, the batch waits for every module
// due within a Debounce of it (at most one Debounce more), and takes them
// all.
func (w *DirWatcher) takeDue(now time.Time) (due []string, next time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return nil, -1
	}
	var first time.Time
	for _, at := range w.pending {
		if d := at.Add(w.debounce); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	if first.After(now) {
		return nil, first.Sub(now)
	}
	window, last := first.Add(w.debounce), first
	for _, at := range w.pending {
		if d := at.Add(w.debounce); !d.After(window) && d.After(last) {
			last = d
		}
	}
	if last.After(now) {
		return nil, last.Sub(now)
	}
	for name, at := range w.pending {
		if !at.Add(w.debounce).After(now) {
			due = append(due, name)
			delete(w.pending, name)
		}
	}
	return due, 0
}

// loadWorkers bounds the modules of a directory that load at once.
func loadWorkers() int { return max(4, runtime.GOMAXPROCS(0)) }

// syncJob is one module of a batch syncAll makes match its files.
type syncJob struct {
	name string
	size int64         // of NAME.wasm: the loads start smallest first
	done chan struct{} // closed when prepare is done

	// Set by prepare.
	remove  bool   // NAME.wasm is gone: unload the module
	skip    bool   // unchanged since it loaded
	version string // hash of the wasm and the sidecar
	hash    string // of the wasm ("" when it could not be read)
	gen     uint64 // the module's generation when its file was read
	mod     *Module
	err     error // why it cannot load
}

// syncAll makes the modules names match their files: load, reload or
// unload. The loads run together, at most loadWorkers at once, so that a
// directory loads in about the time of its slowest module rather than the
// sum of them all: modules that use up their deadlines (a compile bomb, a
// start function that never returns) do not add up. They start smallest
// first (a small module then does not wait for a compiler process behind a
// large one), and their results apply in the order of the names, whatever
// the order they finished in: which module a tenant cap refuses, the
// conflicts and the refusals are those of loading the modules one by one,
// in that order. Once ctx is done, nothing more applies.
func (w *DirWatcher) syncAll(ctx context.Context, names []string) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	jobs := make([]*syncJob, len(names))
	for i, name := range names {
		jobs[i] = &syncJob{name: name, done: make(chan struct{})}
		if st, err := os.Stat(filepath.Join(w.dir, name+".wasm")); err == nil {
			jobs[i].size = st.Size()
		}
	}
	bySize := slices.Clone(jobs)
	slices.SortStableFunc(bySize, func(a, b *syncJob) int { return cmp.Compare(a.size, b.size) })
	go func() {
		slots := make(chan struct{}, loadWorkers())
		for _, j := range bySize {
			slots <- struct{}{}
			go func() {
				defer func() {
					<-slots
					close(j.done)
				}()
				w.prepare(ctx, j)
			}()
		}
	}()
	for _, j := range jobs {
		<-j.done
		if ctx.Err() != nil {
			if j.mod != nil {
				_ = j.mod.Close(context.Background())
			}
			continue
		}
		w.commit(ctx, j)
	}
}

// prepare reads module j.name's files and, when they changed, compiles,
// instantiates and describes it (the slow part, which touches nothing of
// the registry).
func (w *DirWatcher) prepare(ctx context.Context, j *syncJob) {
	j.gen = w.reg.generation(w.tenant, j.name)
	wasm, side, sig, err := readModuleFiles(filepath.Join(w.dir, j.name+".wasm"), w.reg.limits(w.tenant))
	if errors.Is(err, os.ErrNotExist) {
		j.remove = true
		return
	}
	if err != nil {
		j.err = err
		return
	}
	// The module's hash, then its version: the hash with the sidecar and
	// the signature (each file hashed once: a module may be megabytes).
	j.hash = contentHash(wasm)
	j.version = contentHash(append(append(append(append([]byte(j.hash), 0), side...), 0), sig...))
	w.mu.Lock()
	same := w.loaded[j.name] == j.version
	w.mu.Unlock()
	if same {
		if _, ok := w.reg.Module(w.tenant, j.name); ok {
			j.skip = true // an event without a change (chmod, a touch)
			return
		}
	}
	src := Source{Name: j.name, Wasm: wasm, Signature: sig, hash: j.hash}
	if side != nil {
		src.Sidecar, err = ParseSidecar(side)
		if err != nil {
			j.err = newPluginError(j.name, "sidecar", "", err, DefaultMaxErrorBytes)
			return
		}
	}
	if src, j.err = w.reg.source(w.tenant, src); j.err == nil {
		j.mod, j.err = w.reg.prepare(ctx, src)
	}
}

// commit applies what prepare found: the module is unloaded, registered
// or rejected (a rejected one is retried on its next event).
func (w *DirWatcher) commit(ctx context.Context, j *syncJob) {
	switch {
	case j.skip:
	case j.remove:
		w.mu.Lock()
		delete(w.loaded, j.name)
		w.mu.Unlock()
		if !w.reg.Unload(w.tenant, j.name) {
			w.reg.forgetRefusal(w.tenant, j.name)
		}
	default:
		// A module and its signature are two files, written one after
		// the other: a signature missing or not matching the module read
		// beside it gets one more Debounce to come before the module is
		// refused.
		w.mu.Lock()
		waited := w.sigWait[j.name]
		delete(w.sigWait, j.name)
		if (errors.Is(j.err, ErrBadSignature) || errors.Is(j.err, ErrUnsigned)) && !waited {
			w.sigWait[j.name] = true
			w.mu.Unlock()
			w.mark(j.name)
			return
		}
		w.mu.Unlock()
		// A held version counts as seen: it waits for approval, not for
		// the file's next event.
		_, err := w.reg.commitIf(ctx, w.tenant, j.name, j.hash, j.mod, j.err, false, &j.gen)
		if errors.Is(err, errSuperseded) {
			w.reg.log.Debug("plugin file read before another version loaded: its next event decides", "tenant", w.tenant, "plugin", j.name, "module", j.hash)
		}
		if err == nil || errors.Is(err, ErrHeld) {
			w.mu.Lock()
			w.loaded[j.name] = j.version
			w.mu.Unlock()
		}
	}
}
