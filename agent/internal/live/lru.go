package live

import (
	"container/list"
	"sync"
)

// lru keeps values by key up to a budget of their weights, dropping the
// least recently used past it. It is safe for concurrent use.
type lru[V any] struct {
	budget int64

	mu     sync.Mutex
	items  map[string]*list.Element // of *lruItem[V]
	order  *list.List               // most recently used first
	weight int64
}

type lruItem[V any] struct {
	key    string
	value  V
	weight int64
}

func newLRU[V any](budget int64) *lru[V] {
	return &lru[V]{budget: budget, items: map[string]*list.Element{}, order: list.New()}
}

// get returns the value of key, if kept.
func (c *lru[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruItem[V]).value, true
	}
	var zero V
	return zero, false
}

// put keeps value under key; a value heavier than the budget is not kept.
func (c *lru[V]) put(key string, value V, weight int64) {
	if weight > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; ok {
		return
	}
	c.items[key] = c.order.PushFront(&lruItem[V]{key: key, value: value, weight: weight})
	c.weight += weight
	for c.weight > c.budget {
		old := c.order.Remove(c.order.Back()).(*lruItem[V])
		delete(c.items, old.key)
		c.weight -= old.weight
	}
}
