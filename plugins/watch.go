package plugins

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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
// (with its sidecar NAME.json, if any) is module NAME. A new or changed
// file is compiled and described in the background and swapped in
// atomically; a file that fails is rejected with a logged reason while the
// previous version keeps serving; a removed file unregisters its module.
// Write files atomically (write elsewhere, then rename into the directory)
// for the fastest swaps; partial writes are tolerated (debounced, and a
// failed load is retried on the next event).
type DirWatcher struct {
	reg      *Registry
	tenant   string
	dir      string
	debounce time.Duration
	fsw      *fsnotify.Watcher

	mu      sync.Mutex
	pending map[string]time.Time // module name → time of its last event
	loaded  map[string]string    // module name → hash of wasm+sidecar last handled
	wake    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// Watch loads every module of dir for tenant, then keeps watching it until
// ctx is done or the DirWatcher is closed. Modules that fail to load are
// rejected (logged, reported to OnChange) without failing Watch; Watch
// fails only when dir cannot be watched.
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
		wake:     make(chan struct{}, 1),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	// The initial scan, synchronous: the directory's modules are served
	// when Watch returns.
	for _, name := range w.scan() {
		w.sync(ctx, name)
	}
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

// moduleOf maps a file name to its module name: NAME.wasm and NAME.json.
// Hidden files (editors' and atomic writers' temporaries) are ignored.
func (w *DirWatcher) moduleOf(file string) (string, bool) {
	if strings.HasPrefix(file, ".") {
		return "", false
	}
	for _, ext := range []string{".wasm", ".json"} {
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

// work loads the modules whose files settled, one at a time.
func (w *DirWatcher) work(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.mu.Lock()
		var due []string
		next := time.Duration(-1)
		now := time.Now()
		for name, at := range w.pending {
			if wait := at.Add(w.debounce).Sub(now); wait <= 0 {
				due = append(due, name)
				delete(w.pending, name)
			} else if next < 0 || wait < next {
				next = wait
			}
		}
		w.mu.Unlock()
		for _, name := range due {
			if ctx.Err() != nil {
				return
			}
			w.sync(ctx, name)
		}
		if len(due) > 0 {
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

// sync makes module name match its files: load, reload or unload.
func (w *DirWatcher) sync(ctx context.Context, name string) {
	path := filepath.Join(w.dir, name+".wasm")
	wasm, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		w.mu.Lock()
		delete(w.loaded, name)
		w.mu.Unlock()
		if !w.reg.Unload(w.tenant, name) {
			w.reg.forgetRefusal(w.tenant, name)
		}
		return
	}
	side, serr := os.ReadFile(filepath.Join(w.dir, name+".json"))
	if serr != nil && !errors.Is(serr, os.ErrNotExist) {
		err = serr
	}
	if err != nil {
		w.reg.notify(Change{Kind: Rejected, Tenant: w.tenant, Name: name, Err: &PluginError{Plugin: name, Export: "load", Err: err}})
		return
	}
	version := contentHash(append(append(bytes.Clone(wasm), 0), side...))
	w.mu.Lock()
	same := w.loaded[name] == version
	w.mu.Unlock()
	if same {
		if _, ok := w.reg.Module(w.tenant, name); ok {
			return // an event without a change (chmod, a touch)
		}
	}
	src := Source{Name: name, Wasm: wasm}
	if side != nil {
		src.Sidecar, err = ParseSidecar(side)
		if err != nil {
			w.reg.notify(Change{Kind: Rejected, Tenant: w.tenant, Name: name, Hash: contentHash(wasm), Err: newPluginError(name, "sidecar", "", err, DefaultMaxErrorBytes)})
			return
		}
	}
	if _, err := w.reg.Load(ctx, w.tenant, src); err != nil {
		return // rejected (notified by Load); retried on the next event
	}
	w.mu.Lock()
	w.loaded[name] = version
	w.mu.Unlock()
}
