package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// faultSpec is the body of POST /faults: which requests to fail, and how.
// Empty selectors match every request.
type faultSpec struct {
	// Request is the request's name, as kmsg names it: "OffsetCommit",
	// "Fetch", "Heartbeat", ...; "" means every request.
	Request string `json:"request"`
	// Group and Topic select the entities of the request: a commit of the
	// group, a partition of the topic.
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Error is the Kafka error the entities are answered with, by its
	// protocol name (NOT_COORDINATOR, UNKNOWN_SERVER_ERROR, ...). Defaults
	// to UNKNOWN_SERVER_ERROR.
	Error string `json:"error"`
	// Count is how many requests fail: -1 until the fault is deleted.
	// Defaults to 1.
	Count int `json:"count"`
}

// control serves kfake's faults over HTTP, for tests that run the cluster
// as its own process:
//
//	POST   /faults       a faultSpec as JSON; answers {"id": n}
//	GET    /faults/{id}  answers {"hits": n}: the requests it failed so far
//	DELETE /faults/{id}  removes it
type control struct {
	c *kfake.Cluster

	mu     sync.Mutex
	next   int
	faults map[int]*kfake.FaultHandle
}

func newControl(c *kfake.Cluster) http.Handler {
	ctl := &control{c: c, faults: map[int]*kfake.FaultHandle{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /faults", ctl.add)
	mux.HandleFunc("GET /faults/{id}", ctl.hits)
	mux.HandleFunc("DELETE /faults/{id}", ctl.remove)
	return mux
}

func (ctl *control) add(w http.ResponseWriter, r *http.Request) {
	var spec faultSpec
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		http.Error(w, "fault: "+err.Error(), http.StatusBadRequest)
		return
	}
	f, err := spec.fault()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := ctl.c.Fault(f)
	ctl.mu.Lock()
	ctl.next++
	id := ctl.next
	ctl.faults[id] = h
	ctl.mu.Unlock()
	writeJSON(w, map[string]int{"id": id})
}

func (ctl *control) handle(w http.ResponseWriter, r *http.Request) *kfake.FaultHandle {
	id, _ := strconv.Atoi(r.PathValue("id"))
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	h := ctl.faults[id]
	if h == nil {
		http.Error(w, "no fault "+r.PathValue("id"), http.StatusNotFound)
	}
	return h
}

func (ctl *control) hits(w http.ResponseWriter, r *http.Request) {
	if h := ctl.handle(w, r); h != nil {
		writeJSON(w, map[string]int{"hits": h.Hits()})
	}
}

func (ctl *control) remove(w http.ResponseWriter, r *http.Request) {
	if h := ctl.handle(w, r); h != nil {
		h.Remove()
		w.WriteHeader(http.StatusNoContent)
	}
}

// fault turns spec into a kfake.Fault, naming what it does not know.
func (spec faultSpec) fault() (kfake.Fault, error) {
	f := kfake.Fault{Group: spec.Group, Topic: spec.Topic, Count: spec.Count}
	if spec.Count < -1 {
		return f, fmt.Errorf("fault: count %d: must be -1 (until deleted) or more", spec.Count)
	}
	if spec.Request != "" {
		k, ok := requestKey(spec.Request)
		if !ok {
			return f, fmt.Errorf("fault: no request named %q", spec.Request)
		}
		f.Keys = []kmsg.Key{k}
	}
	if spec.Error != "" {
		e, ok := kafkaError(spec.Error)
		if !ok {
			return f, fmt.Errorf("fault: no Kafka error named %q", spec.Error)
		}
		f.Err = e
	}
	return f, nil
}

// requestKey is the key of the request kmsg names name.
func requestKey(name string) (kmsg.Key, bool) {
	for k := int16(0); k < 1000; k++ {
		if n := kmsg.NameForKey(k); n != "" && strings.EqualFold(n, name) {
			return kmsg.Key(k), true
		}
	}
	return 0, false
}

// kafkaError is the error whose protocol name is name.
func kafkaError(name string) (*kerr.Error, bool) {
	for code := int16(-1); code < 1000; code++ {
		if e := kerr.TypedErrorForCode(code); e != nil && strings.EqualFold(e.Message, name) {
			return e, true
		}
	}
	return nil, false
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
