/* A persistent hash map (a hash array mapped trie, CHAMP layout) of Python objects, in C.
 *
 * Why: the metadata image keeps every topic in persistent maps.  A zonal outage delta replaces
 * 6,667 topics of 100,000 and must apply in milliseconds; adding one topic must cost about a
 * microsecond.  Path copying is what a persistent map costs, and in a refcounted heap its price
 * is not the bytes copied but the reference counts: a copied node shares its children and its
 * entries with the original, and bumping a count stored in each of them is a cache miss per
 * child (32 for an inner node), per key and per value.  ``immutables.Map`` pays that, plus a
 * Python call and ``Uuid.__hash__`` per key: about a microsecond per write at 100,000 keys.
 *
 * So here nodes and entries are named by 32-bit indexes into process-wide tables, and their
 * reference counts live in the tables, beside what they count (``slots[id].refs``,
 * ``recs[r].refs``): copying a node is a memcpy of its index array plus increments in dense
 * tables, never a touch of the children's or the entries' own memory.  Python
 * objects are touched only when an entry record is made or freed.  A batch of writes is one
 * transient tree: a node is copied once, then changed in place.
 *
 * Layout.  A node holds up to 32 slots, chosen by 5 bits of the key's 64-bit hash (bits 63-59 at
 * the root, 58-54 below, ..., 3-0 at level 12: the trie's order is the hashes' order).  ``datamap`` marks the slots holding an entry,
 * ``nodemap`` those holding a child; ``items`` holds the entries' record indexes in slot order,
 * then the children's node ids.  Below level 12 a node is a collision node: records of one
 * hash, in no order, maps unused.  A record is (hash, key, value) and owns one reference to each
 * of key and value.  Index 0 of both tables is never used (0 = none).
 *
 * Invariants (kept by pm_assoc / pm_dissoc; pm_equal relies on the first):
 *   - canonical shape: a key sits at the shallowest level where no other key shares its slot
 *     path, so a node other than the root holds at least two keys below it, and two maps with
 *     the same keys have the same shape (a delete pulls a lone entry back up into its parent);
 *   - ``slots[id].refs`` counts the parents, maps and mutations holding node ``id``;
 *     ``recs[r].refs`` the nodes holding record ``r``.  A node is changed in place only when its
 *     count is 1 and it was reached from a root the operation owns through nodes whose counts
 *     are all 1: nothing else can see it.  A record is changed in place only when its count is
 *     1 and its node is changeable.  Anything else is copied first (copy on write), so a reader
 *     of an older map never sees a change;
 *   - nothing is freed and no Python reference is dropped in the middle of an operation: what
 *     an operation lets go of goes to its ``pm_garbage`` and is freed by pm_garbage_flush once
 *     the tree is consistent (a value's finalizer may run Python code that uses the maps);
 *   - no pointer into the tables (``pm_rec *``) is held across an allocation of a record or a
 *     node: the tables move when they grow.  Node memory itself never moves.
 *
 * Keys are exact ``str`` or exact ``Uuid`` objects (``pm_setup`` gives the Uuid class and the
 * offset of its ``_b`` bytes slot): their hash and equality run no Python code.  All of this runs
 * with the GIL held.  The tables only grow (freed indexes are reused, not returned).
 */
#ifndef KRAFT_PMAP_H
#define KRAFT_PMAP_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PM_MAX_SHIFT 60
#define PM_STACK 16
#define PM_MAX_INDEX 0xFFFFFFF0u

typedef struct {
    uint64_t hash;     /* free record: the next free index */
    PyObject *key;     /* free record: NULL */
    PyObject *value;
    uint32_t refs;     /* the nodes holding it */
    uint32_t unused;
} pm_rec;

typedef struct pm_node pm_node;

/* A node's entry in the id table: its memory and its count (beside it: one cache line for both). */
typedef struct {
    pm_node *node;     /* free id: NULL */
    uint32_t refs;     /* free id: 0 */
    uint32_t next;     /* free id: the next free id */
} pm_slot;

struct pm_node {
    uint32_t datamap;
    uint32_t nodemap;
    uint32_t id;
    uint32_t ndata;
    uint32_t nchild;
    /* uint32_t items[ndata + nchild]: record indexes, then child node ids */
};

typedef struct {
    pm_rec *recs;
    uint32_t rec_cap, rec_top, rec_free;
    pm_slot *slots;
    uint32_t node_cap, node_top, node_free;
} pm_tables;

static pm_tables pm_t = {NULL, 0, 1, 0, NULL, 0, 1, 0};
static PyTypeObject *pm_uuid_type = NULL;
static Py_ssize_t pm_uuid_offset = -1;

static inline uint32_t *pm_items(pm_node *n) { return (uint32_t *)(n + 1); }
static inline uint32_t *pm_kids(pm_node *n) { return pm_items(n) + n->ndata; }
static inline pm_node *pm_node_at(uint32_t id) { return pm_t.slots[id].node; }
static inline pm_rec *pm_rec_at(uint32_t r) { return &pm_t.recs[r]; }
/* The slot bit of a hash at a level: 5 bits from the top (bits 63-59 at the root, 58-54 below,
 * ..., 3-0 at level 12, as an even slot), so that the trie's order is the hashes' numeric
 * order: a map built from keys sorted by hash lays out siblings side by side. */
static inline uint32_t pm_bit(uint64_t hash, int shift) { return 1u << (uint32_t)((hash << shift) >> 59); }
static inline int pm_popcount(uint32_t x) {  /* without -mpopcnt, __builtin_popcount is a libgcc call */
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (int)((x * 0x01010101u) >> 24);
}
static inline int pm_index(uint32_t map, uint32_t bit) { return pm_popcount(map & (bit - 1)); }

static void pm_setup(PyObject *uuid_type, Py_ssize_t offset) {
    pm_uuid_type = (PyTypeObject *)uuid_type;
    pm_uuid_offset = offset;
}

/* ------------------------------------------------------------------ keys */

static inline const unsigned char *pm_uuid_bytes(PyObject *key) {
    PyObject *b = *(PyObject **)((char *)key + pm_uuid_offset);
    if (b == NULL || !PyBytes_CheckExact(b) || PyBytes_GET_SIZE(b) != 16) return NULL;
    return (const unsigned char *)PyBytes_AS_STRING(b);
}

static inline uint64_t pm_load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t pm_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* The key's hash: 0 and *out set; 1 when the key is not a str or a Uuid (no exception set);
 * -1 with an exception set (a str that cannot be made ready). */
static inline int pm_hash(PyObject *key, uint64_t *out) {
    if (PyUnicode_CheckExact(key)) {
        Py_hash_t h = PyObject_Hash(key);   /* cached in the str after the first time */
        if (h == -1 && PyErr_Occurred()) return -1;
        *out = pm_mix((uint64_t)h);
        return 0;
    }
    if (pm_uuid_type != NULL && Py_TYPE(key) == pm_uuid_type) {
        const unsigned char *b = pm_uuid_bytes(key);
        if (b == NULL) return 1;
        *out = pm_mix(pm_load64(b) * 0x9E3779B97F4A7C15ULL ^ pm_load64(b + 8));
        return 0;
    }
    return 1;
}

/* Equality of two keys of one hash (both hashed by pm_hash). */
static inline int pm_key_eq(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (Py_TYPE(a) != Py_TYPE(b)) return 0;
    if (PyUnicode_CheckExact(a)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(a);
        int kind = PyUnicode_KIND(a);
        return n == PyUnicode_GET_LENGTH(b) && kind == (int)PyUnicode_KIND(b)
               && memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * (size_t)kind) == 0;
    }
    {
        const unsigned char *x = pm_uuid_bytes(a), *y = pm_uuid_bytes(b);
        return x != NULL && y != NULL && memcmp(x, y, 16) == 0;
    }
}

/* ------------------------------------------------------------------ tables */

static int pm_grow_table(void **p, uint32_t cap, uint32_t want, size_t size) {
    void *q = PyMem_Realloc(*p, (size_t)want * size);
    if (q == NULL) return -1;
    memset((char *)q + (size_t)cap * size, 0, (size_t)(want - cap) * size);
    *p = q;
    return 0;
}

/* A new record owning a reference to key and value, count 1.  0 (MemoryError set) on failure. */
static uint32_t pm_rec_new(uint64_t hash, PyObject *key, PyObject *value) {
    uint32_t r = pm_t.rec_free;
    if (r != 0) {
        pm_t.rec_free = (uint32_t)pm_t.recs[r].hash;
        /* the next record made comes from there: start loading it now */
        __builtin_prefetch(&pm_t.recs[pm_t.rec_free], 1, 3);
    } else {
        if (pm_t.rec_top >= pm_t.rec_cap) {
            uint32_t want = pm_t.rec_cap ? pm_t.rec_cap * 2 : 1024;
            if (pm_t.rec_cap >= PM_MAX_INDEX / 2) want = PM_MAX_INDEX;
            if (pm_t.rec_top >= want || pm_grow_table((void **)&pm_t.recs, pm_t.rec_cap, want, sizeof(pm_rec)) < 0) {
                PyErr_NoMemory();
                return 0;
            }
            pm_t.rec_cap = want;
        }
        r = pm_t.rec_top++;
    }
    Py_INCREF(key);
    Py_INCREF(value);
    pm_t.recs[r].hash = hash;
    pm_t.recs[r].key = key;
    pm_t.recs[r].value = value;
    pm_t.recs[r].refs = 1;
    return r;
}

/* A new node of that many entries and children (items not set), count 1.  NULL (MemoryError set). */
static pm_node *pm_node_new(uint32_t ndata, uint32_t nchild) {
    uint32_t id = pm_t.node_free;
    pm_node *n = (pm_node *)PyMem_Malloc(sizeof(pm_node) + (size_t)(ndata + nchild) * sizeof(uint32_t));
    if (n == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (id != 0) {
        pm_t.node_free = pm_t.slots[id].next;
        /* the next node made takes that id: start loading its table entry now */
        __builtin_prefetch(&pm_t.slots[pm_t.node_free], 1, 3);
    } else {
        if (pm_t.node_top >= pm_t.node_cap) {
            uint32_t want = pm_t.node_cap ? pm_t.node_cap * 2 : 1024;
            if (pm_t.node_cap >= PM_MAX_INDEX / 2) want = PM_MAX_INDEX;
            if (pm_t.node_top >= want
                    || pm_grow_table((void **)&pm_t.slots, pm_t.node_cap, want, sizeof(pm_slot)) < 0) {
                PyMem_Free(n);
                PyErr_NoMemory();
                return NULL;
            }
            pm_t.node_cap = want;
        }
        id = pm_t.node_top++;
    }
    n->datamap = 0;
    n->nodemap = 0;
    n->id = id;
    n->ndata = ndata;
    n->nchild = nchild;
    pm_t.slots[id].node = n;
    pm_t.slots[id].refs = 1;
    return n;
}

/* Free a node's memory and its id, without touching what it held (moved elsewhere, or released). */
static void pm_node_discard(pm_node *n) {
    uint32_t id = n->id;
    pm_t.slots[id].node = NULL;
    pm_t.slots[id].refs = 0;
    pm_t.slots[id].next = pm_t.node_free;
    pm_t.node_free = id;
    PyMem_Free(n);
}

/* Undo pm_rec_new before the record was shared (its references dropped at once: the caller
 * still holds key and value). */
static void pm_rec_unmake(uint32_t r) {
    pm_rec *x = &pm_t.recs[r];
    Py_DECREF(x->key);
    Py_DECREF(x->value);
    x->key = NULL;
    x->value = NULL;
    x->hash = pm_t.rec_free;
    x->refs = 0;
    pm_t.rec_free = r;
}

/* ------------------------------------------------------------------ garbage */

typedef struct {
    uint32_t *nodes;
    Py_ssize_t nnodes, capnodes;
    uint32_t *recs;
    Py_ssize_t nrecs, caprecs;
    PyObject **objs;
    Py_ssize_t nobjs, capobjs;
    uint32_t node_buf[32];
    uint32_t rec_buf[32];
    PyObject *obj_buf[16];
} pm_garbage;

static void pm_garbage_init(pm_garbage *g) {
    g->nodes = g->node_buf;
    g->nnodes = 0;
    g->capnodes = 32;
    g->recs = g->rec_buf;
    g->nrecs = 0;
    g->caprecs = 32;
    g->objs = g->obj_buf;
    g->nobjs = 0;
    g->capobjs = 16;
}

static int pm_grow_list(void **items, Py_ssize_t *cap, void *inline_buf, size_t size) {
    Py_ssize_t want = *cap * 2;
    void *p;
    if (*items == inline_buf) {
        p = PyMem_Malloc((size_t)want * size);
        if (p != NULL) memcpy(p, *items, (size_t)*cap * size);
    } else {
        p = PyMem_Realloc(*items, (size_t)want * size);
    }
    if (p == NULL) return -1;
    *items = p;
    *cap = want;
    return 0;
}

static void pm_free_rec_now(uint32_t r);
static void pm_free_node_now(uint32_t id);

/* Drop a reference to a Python object once the operation is over. */
static void pm_defer_obj(pm_garbage *g, PyObject *o) {
    if (g->nobjs == g->capobjs && pm_grow_list((void **)&g->objs, &g->capobjs, g->obj_buf, sizeof(PyObject *)) < 0) {
        Py_DECREF(o);  /* no memory for the list: at once (callers are at a consistent point) */
        return;
    }
    g->objs[g->nobjs++] = o;
}

/* Drop one reference to a record / a node; what nobody holds any more is freed at the flush. */
static void pm_rec_release(uint32_t r, pm_garbage *g) {
    if (--pm_t.recs[r].refs > 0) return;
    if (g->nrecs == g->caprecs && pm_grow_list((void **)&g->recs, &g->caprecs, g->rec_buf, sizeof(uint32_t)) < 0) {
        pm_free_rec_now(r);
        return;
    }
    g->recs[g->nrecs++] = r;
}

static void pm_node_release(uint32_t id, pm_garbage *g) {
    if (--pm_t.slots[id].refs > 0) return;
    if (g->nnodes == g->capnodes
            && pm_grow_list((void **)&g->nodes, &g->capnodes, g->node_buf, sizeof(uint32_t)) < 0) {
        pm_free_node_now(id);
        return;
    }
    g->nodes[g->nnodes++] = id;
}

/* Last resorts when a garbage list cannot grow (no memory): free at once, recursively. */
static void pm_free_rec_now(uint32_t r) {
    PyObject *k = pm_t.recs[r].key, *v = pm_t.recs[r].value;
    pm_t.recs[r].key = NULL;
    pm_t.recs[r].value = NULL;
    pm_t.recs[r].hash = pm_t.rec_free;
    pm_t.rec_free = r;
    Py_DECREF(k);
    Py_DECREF(v);
}

static void pm_free_node_now(uint32_t id) {
    pm_node *n = pm_t.slots[id].node;
    uint32_t i, *items = pm_items(n);
    for (i = 0; i < n->ndata; i++)
        if (--pm_t.recs[items[i]].refs == 0) pm_free_rec_now(items[i]);
    for (i = 0; i < n->nchild; i++)
        if (--pm_t.slots[items[n->ndata + i]].refs == 0) pm_free_node_now(items[n->ndata + i]);
    pm_node_discard(n);
}

/* Free what the operation let go of: first every unheld node (what it held is released in
 * turn), then every unheld record, then the Python references.  Finalizers run only in the
 * last step, when every tree is consistent and the lists are this function's own. */
static void pm_garbage_flush(pm_garbage *g) {
    uint32_t i;
    while (g->nnodes > 0) {
        pm_node *n = pm_t.slots[g->nodes[--g->nnodes]].node;
        uint32_t *items = pm_items(n);
        for (i = 0; i < n->ndata; i++) pm_rec_release(items[i], g);
        for (i = 0; i < n->nchild; i++) pm_node_release(items[n->ndata + i], g);
        pm_node_discard(n);
    }
    while (g->nrecs > 0) {
        uint32_t r = g->recs[--g->nrecs];
        pm_rec *x = &pm_t.recs[r];
        pm_defer_obj(g, x->key);
        pm_defer_obj(g, x->value);
        x->key = NULL;
        x->value = NULL;
        x->hash = pm_t.rec_free;
        pm_t.rec_free = r;
    }
    {
        PyObject **objs = g->objs;
        Py_ssize_t k, n = g->nobjs;
        uint32_t *nodes = g->nodes, *recs = g->recs;
        int inline_objs = objs == g->obj_buf;
        PyObject *copy[16];
        if (inline_objs) {  /* the inline buffer is reset below: decref from a copy */
            memcpy(copy, objs, (size_t)n * sizeof(PyObject *));
            objs = copy;
        }
        if (nodes != g->node_buf) PyMem_Free(nodes);
        if (recs != g->rec_buf) PyMem_Free(recs);
        pm_garbage_init(g);
        for (k = 0; k < n; k++) Py_DECREF(objs[k]);
        if (!inline_objs) PyMem_Free(objs);
    }
}

/* A root id with one more holder (0 stays 0). */
static inline uint32_t pm_root_incref(uint32_t id) {
    if (id != 0) pm_t.slots[id].refs++;
    return id;
}

/* Drop a holder of a root id, freeing what nobody holds any more (finalizers may run). */
static void pm_root_drop(uint32_t id) {
    pm_garbage g;
    if (id == 0) return;
    pm_garbage_init(&g);
    pm_node_release(id, &g);
    pm_garbage_flush(&g);
}

/* ------------------------------------------------------------------ copy on write */

/* The node whose id is in ``*slot`` made changeable in place: itself when only this path holds
 * it, else a copy whose id is put in ``*slot`` (the caller's node holding ``slot`` is
 * changeable already, or ``slot`` is the operation's own root).  NULL: no memory. */
static pm_node *pm_editable(uint32_t *slot, pm_garbage *g) {
    uint32_t id = *slot, i, nitems;
    pm_node *n = pm_t.slots[id].node, *c;
    uint32_t *src, *dst;
    if (pm_t.slots[id].refs == 1) return n;
    c = pm_node_new(n->ndata, n->nchild);
    if (c == NULL) return NULL;
    c->datamap = n->datamap;
    c->nodemap = n->nodemap;
    nitems = n->ndata + n->nchild;
    src = pm_items(n);
    dst = pm_items(c);
    memcpy(dst, src, (size_t)nitems * sizeof(uint32_t));
    for (i = 0; i < n->ndata; i++) pm_t.recs[src[i]].refs++;
    for (; i < nitems; i++) pm_t.slots[src[i]].refs++;
    *slot = c->id;
    pm_node_release(id, g);  /* it was held elsewhere too: never freed here */
    return c;
}

/* Give the record at ``*item`` (in a changeable node) the value: in place when only that node
 * holds the record, else a new record of the same key. */
static int pm_set_value(uint32_t *item, PyObject *value, pm_garbage *g) {
    uint32_t r = *item, nr;
    pm_rec *x = &pm_t.recs[r];
    if (x->value == value) return 0;
    if (pm_t.recs[r].refs == 1) {
        PyObject *old = x->value;
        Py_INCREF(value);
        x->value = value;
        pm_defer_obj(g, old);
        return 0;
    }
    nr = pm_rec_new(x->hash, x->key, value);
    if (nr == 0) return -1;
    *item = nr;
    pm_rec_release(r, g);  /* held elsewhere too: never freed here */
    return 0;
}

/* ------------------------------------------------------------------ lookup */

static pm_rec *pm_find(uint32_t root, uint64_t hash, PyObject *key) {
    int shift = 0;
    uint32_t bit, i;
    pm_node *n = root ? pm_t.slots[root].node : NULL;
    while (n != NULL) {
        uint32_t *items = pm_items(n);
        if (shift > PM_MAX_SHIFT) {
            for (i = 0; i < n->ndata; i++) {
                pm_rec *x = &pm_t.recs[items[i]];
                if (pm_key_eq(x->key, key)) return x;
            }
            return NULL;
        }
        bit = pm_bit(hash, shift);
        if (n->datamap & bit) {
            pm_rec *x = &pm_t.recs[items[pm_index(n->datamap, bit)]];
            return (x->hash == hash && pm_key_eq(x->key, key)) ? x : NULL;
        }
        if (!(n->nodemap & bit)) return NULL;
        n = pm_t.slots[pm_kids(n)[pm_index(n->nodemap, bit)]].node;
        shift += 5;
    }
    return NULL;
}

/* ------------------------------------------------------------------ insert */

/* A new node at ``shift`` holding records a and b (of different keys; their references move in).
 * Its id, or 0 (MemoryError set; a and b untouched). */
static uint32_t pm_pair(int shift, uint32_t a, uint32_t b) {
    pm_node *n;
    uint64_t ha = pm_t.recs[a].hash, hb = pm_t.recs[b].hash;
    if (shift > PM_MAX_SHIFT) {
        n = pm_node_new(2, 0);
        if (n == NULL) return 0;
        pm_items(n)[0] = a;
        pm_items(n)[1] = b;
        return n->id;
    }
    {
        uint32_t ba = pm_bit(ha, shift), bb = pm_bit(hb, shift), child;
        if (ba != bb) {
            n = pm_node_new(2, 0);
            if (n == NULL) return 0;
            n->datamap = ba | bb;
            pm_items(n)[ba < bb ? 0 : 1] = a;
            pm_items(n)[ba < bb ? 1 : 0] = b;
            return n->id;
        }
        n = pm_node_new(0, 1);
        if (n == NULL) return 0;
        child = pm_pair(shift + 5, a, b);
        if (child == 0) {
            pm_node_discard(n);
            return 0;
        }
        n->nodemap = ba;
        pm_items(n)[0] = child;
        return n->id;
    }
}

/* Put key -> value under the node whose id is in ``*slot`` (at ``shift``).  *added: 1 when the
 * key was not there.  0, or -1 (MemoryError set; the tree unchanged where the error hit). */
static int pm_assoc(uint32_t *slot, int shift, uint64_t hash, PyObject *key, PyObject *value, pm_garbage *g,
                    int *added) {
    pm_node *n = pm_editable(slot, g), *r;
    uint32_t *items, bit, i, rid;
    int at;
    if (n == NULL) return -1;
    items = pm_items(n);
    if (shift > PM_MAX_SHIFT) {  /* a collision node */
        for (i = 0; i < n->ndata; i++)
            if (pm_key_eq(pm_t.recs[items[i]].key, key)) return pm_set_value(&items[i], value, g);
        r = pm_node_new(n->ndata + 1, 0);
        if (r == NULL) return -1;
        rid = pm_rec_new(hash, key, value);
        if (rid == 0) {
            pm_node_discard(r);
            return -1;
        }
        memcpy(pm_items(r), items, (size_t)n->ndata * sizeof(uint32_t));
        pm_items(r)[n->ndata] = rid;
        *slot = r->id;
        pm_node_discard(n);  /* its records moved to r */
        *added = 1;
        return 0;
    }
    bit = pm_bit(hash, shift);
    if (n->nodemap & bit)
        return pm_assoc(&pm_kids(n)[pm_index(n->nodemap, bit)], shift + 5, hash, key, value, g, added);
    if (n->datamap & bit) {
        uint32_t old, child, *dst;
        pm_rec *x;
        at = pm_index(n->datamap, bit);
        old = items[at];
        x = &pm_t.recs[old];
        if (x->hash == hash && pm_key_eq(x->key, key)) return pm_set_value(&items[at], value, g);
        /* the slot's entry and the new one go down into a new child */
        r = pm_node_new(n->ndata - 1, n->nchild + 1);
        if (r == NULL) return -1;
        rid = pm_rec_new(hash, key, value);
        if (rid == 0) {
            pm_node_discard(r);
            return -1;
        }
        child = pm_pair(shift + 5, old, rid);
        if (child == 0) {
            pm_rec_unmake(rid);
            pm_node_discard(r);
            return -1;
        }
        r->datamap = n->datamap & ~bit;
        r->nodemap = n->nodemap | bit;
        dst = pm_items(r);
        memcpy(dst, items, (size_t)at * sizeof(uint32_t));
        memcpy(dst + at, items + at + 1, (size_t)(n->ndata - at - 1) * sizeof(uint32_t));
        dst += r->ndata;
        i = (uint32_t)pm_index(r->nodemap, bit);
        memcpy(dst, pm_kids(n), (size_t)i * sizeof(uint32_t));
        dst[i] = child;
        memcpy(dst + i + 1, pm_kids(n) + i, (size_t)(n->nchild - i) * sizeof(uint32_t));
        *slot = r->id;
        pm_node_discard(n);  /* everything it held moved to r or to the child */
        *added = 1;
        return 0;
    }
    /* an empty slot: a new entry */
    r = pm_node_new(n->ndata + 1, n->nchild);
    if (r == NULL) return -1;
    rid = pm_rec_new(hash, key, value);
    if (rid == 0) {
        pm_node_discard(r);
        return -1;
    }
    r->datamap = n->datamap | bit;
    r->nodemap = n->nodemap;
    at = pm_index(r->datamap, bit);
    memcpy(pm_items(r), items, (size_t)at * sizeof(uint32_t));
    pm_items(r)[at] = rid;
    memcpy(pm_items(r) + at + 1, items + at, (size_t)(n->ndata - at + n->nchild) * sizeof(uint32_t));
    *slot = r->id;
    pm_node_discard(n);
    *added = 1;
    return 0;
}

/* Put key -> value in the tree whose root id is ``*root`` (0: empty).  0 / -1 as pm_assoc. */
static int pm_root_assoc(uint32_t *root, uint64_t hash, PyObject *key, PyObject *value, pm_garbage *g, int *added) {
    if (*root == 0) {
        pm_node *n = pm_node_new(1, 0);
        uint32_t rid;
        if (n == NULL) return -1;
        rid = pm_rec_new(hash, key, value);
        if (rid == 0) {
            pm_node_discard(n);
            return -1;
        }
        n->datamap = pm_bit(hash, 0);
        pm_items(n)[0] = rid;
        *root = n->id;
        *added = 1;
        return 0;
    }
    return pm_assoc(root, 0, hash, key, value, g, added);
}

/* ------------------------------------------------------------------ building from many keys */

typedef struct {
    uint64_t hash;
    PyObject *key;     /* borrowed: the caller holds them until pm_build returns */
    PyObject *value;
    Py_ssize_t order;  /* position in the input: a later pair of a key wins */
} pm_item;

static int pm_item_cmp(const void *a, const void *b) {
    const pm_item *x = (const pm_item *)a, *y = (const pm_item *)b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->order < y->order ? -1 : (x->order > y->order ? 1 : 0);
}

/* Free the nodes of a subtree built by pm_build_node, leaving its records alone. */
static void pm_discard_built(uint32_t id) {
    pm_node *n = pm_t.slots[id].node;
    uint32_t i;
    for (i = 0; i < n->nchild; i++) pm_discard_built(pm_kids(n)[i]);
    pm_node_discard(n);
}

/* The node at ``shift`` of the records recs[lo..hi) (at least two, sorted by hash, all sharing
 * the hash bits above ``shift``).  Children are built first, so the children of a node -- the
 * leaves under a level-2 node, most of all -- get neighbouring ids.  Its id, or 0 (MemoryError
 * set, nothing left allocated but the records). */
static uint32_t pm_build_node(const uint32_t *recs, size_t lo, size_t hi, int shift) {
    uint32_t kids[32], nkids = 0, ndata = 0, datamap = 0, nodemap = 0, i;
    uint32_t data[32];
    size_t a, b;
    pm_node *n;
    if (shift > PM_MAX_SHIFT) {  /* keys of one hash */
        n = pm_node_new((uint32_t)(hi - lo), 0);
        if (n == NULL) return 0;
        for (a = lo; a < hi; a++) pm_items(n)[a - lo] = recs[a];
        return n->id;
    }
    for (a = lo; a < hi; a = b) {
        uint32_t bit = pm_bit(pm_t.recs[recs[a]].hash, shift);
        for (b = a + 1; b < hi && pm_bit(pm_t.recs[recs[b]].hash, shift) == bit; b++) {
        }
        if (b - a == 1) {
            data[ndata++] = recs[a];
            datamap |= bit;
        } else {
            uint32_t kid = pm_build_node(recs, a, b, shift + 5);
            if (kid == 0) {
                for (i = 0; i < nkids; i++) pm_discard_built(kids[i]);
                return 0;
            }
            kids[nkids++] = kid;
            nodemap |= bit;
        }
    }
    n = pm_node_new(ndata, nkids);
    if (n == NULL) {
        for (i = 0; i < nkids; i++) pm_discard_built(kids[i]);
        return 0;
    }
    n->datamap = datamap;
    n->nodemap = nodemap;
    memcpy(pm_items(n), data, ndata * sizeof(uint32_t));
    memcpy(pm_kids(n), kids, nkids * sizeof(uint32_t));
    return n->id;
}

/* A tree of the pairs items[0..n) (hash, key, value, input position; keys hashed by pm_hash):
 * sorted by hash, a later pair of a key wins, one record each, then the nodes bottom-up.  The
 * items are reordered.  Its root id (0 for no pairs) and *count; -1 on error (MemoryError set,
 * nothing allocated). */
static int pm_build(pm_item *items, size_t n, uint32_t *root, Py_ssize_t *count) {
    size_t i, j, k, m = 0;
    uint32_t *recs;
    *root = 0;
    *count = 0;
    if (n == 0) return 0;
    qsort(items, n, sizeof(pm_item), pm_item_cmp);
    /* keep the last pair of each key (equal keys have equal hashes: they are in one run) */
    for (i = 0; i < n; i = j) {
        for (j = i + 1; j < n && items[j].hash == items[i].hash; j++) {
        }
        for (k = i; k < j; k++) {
            size_t later;
            int superseded = 0;
            for (later = k + 1; later < j; later++)
                if (pm_key_eq(items[k].key, items[later].key)) superseded = 1;
            if (!superseded) items[m++] = items[k];
        }
    }
    recs = (uint32_t *)PyMem_Malloc(m * sizeof(uint32_t));
    if (recs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < m; i++) {
        recs[i] = pm_rec_new(items[i].hash, items[i].key, items[i].value);
        if (recs[i] == 0) {
            while (i > 0) pm_rec_unmake(recs[--i]);
            PyMem_Free(recs);
            return -1;
        }
    }
    if (m == 1) {
        pm_node *r = pm_node_new(1, 0);
        if (r != NULL) {
            r->datamap = pm_bit(items[0].hash, 0);
            pm_items(r)[0] = recs[0];
            *root = r->id;
        }
    } else {
        *root = pm_build_node(recs, 0, m, 0);
    }
    if (*root == 0) {
        for (i = 0; i < m; i++) pm_rec_unmake(recs[i]);
        PyMem_Free(recs);
        return -1;
    }
    PyMem_Free(recs);
    *count = (Py_ssize_t)m;
    return 0;
}

/* ------------------------------------------------------------------ delete */

/* Remove the key (present: the caller checked with pm_find) from under the node whose id is in
 * ``*slot`` (at ``shift``).  A child left with one entry and no children is pulled up into its
 * parent; a root left empty becomes 0.  0, or -1 (MemoryError set, nothing removed). */
static int pm_dissoc(uint32_t *slot, int shift, uint64_t hash, PyObject *key, pm_garbage *g) {
    pm_node *n = pm_editable(slot, g), *r;
    uint32_t *items, bit, i;
    int at;
    if (n == NULL) return -1;
    items = pm_items(n);
    if (shift > PM_MAX_SHIFT) {
        for (i = 0; i < n->ndata; i++) {
            if (pm_key_eq(pm_t.recs[items[i]].key, key)) {
                pm_rec_release(items[i], g);
                items[i] = items[n->ndata - 1];
                n->ndata--;  /* shrinking in place: the allocation only has room to spare */
                return 0;
            }
        }
        return 0;
    }
    bit = pm_bit(hash, shift);
    if (n->datamap & bit) {
        at = pm_index(n->datamap, bit);
        pm_rec_release(items[at], g);
        memmove(items + at, items + at + 1, (size_t)(n->ndata - at - 1 + n->nchild) * sizeof(uint32_t));
        n->ndata--;
        n->datamap &= ~bit;
        if (n->ndata == 0 && n->nchild == 0) {  /* only the root can empty */
            *slot = 0;
            pm_node_release(n->id, g);
        }
        return 0;
    }
    if (n->nodemap & bit) {
        uint32_t *kids = pm_kids(n), cid;
        pm_node *c;
        int j = pm_index(n->nodemap, bit);
        if (pm_dissoc(&kids[j], shift + 5, hash, key, g) < 0) return -1;
        cid = kids[j];
        if (cid == 0) {  /* the child emptied (only after a pull-up that found no memory) */
            memmove(kids + j, kids + j + 1, (size_t)(n->nchild - j - 1) * sizeof(uint32_t));
            n->nchild--;
            n->nodemap &= ~bit;
            if (n->ndata == 0 && n->nchild == 0) {
                *slot = 0;
                pm_node_release(n->id, g);
            }
            return 0;
        }
        c = pm_t.slots[cid].node;
        if (c->nchild == 0 && c->ndata == 1) {
            /* pull the lone entry up into this node's slot (c is changeable: it was just edited) */
            r = pm_node_new(n->ndata + 1, n->nchild - 1);
            if (r == NULL) {  /* the key is gone and the tree valid, only not canonical */
                PyErr_Clear();
                return 0;
            }
            r->datamap = n->datamap | bit;
            r->nodemap = n->nodemap & ~bit;
            at = pm_index(r->datamap, bit);
            memcpy(pm_items(r), items, (size_t)at * sizeof(uint32_t));
            pm_items(r)[at] = pm_items(c)[0];
            memcpy(pm_items(r) + at + 1, items + at, (size_t)(n->ndata - at) * sizeof(uint32_t));
            memcpy(pm_kids(r), kids, (size_t)j * sizeof(uint32_t));
            memcpy(pm_kids(r) + j, kids + j + 1, (size_t)(n->nchild - j - 1) * sizeof(uint32_t));
            *slot = r->id;
            pm_node_discard(c);  /* its record moved to r */
            pm_node_discard(n);
        }
        return 0;
    }
    return 0;
}

/* ------------------------------------------------------------------ iteration and equality */

typedef struct {
    pm_node *node[PM_STACK];
    uint32_t pos[PM_STACK];
    int depth;  /* -1: done */
} pm_iter;

static void pm_iter_init(pm_iter *it, uint32_t root) {
    it->depth = root == 0 ? -1 : 0;
    it->node[0] = root == 0 ? NULL : pm_t.slots[root].node;
    it->pos[0] = 0;
}

/* The next record, or NULL at the end (a node's entries before its children).  The tree must
 * not change while it is walked (a map's never does). */
static pm_rec *pm_iter_next(pm_iter *it) {
    while (it->depth >= 0) {
        pm_node *n = it->node[it->depth];
        uint32_t p = it->pos[it->depth];
        if (p < n->ndata) {
            it->pos[it->depth] = p + 1;
            return &pm_t.recs[pm_items(n)[p]];
        }
        if (p < n->ndata + n->nchild) {
            it->pos[it->depth] = p + 1;
            it->depth++;
            it->node[it->depth] = pm_t.slots[pm_items(n)[p]].node;
            it->pos[it->depth] = 0;
            continue;
        }
        it->depth--;
    }
    return NULL;
}

static int pm_values_equal(PyObject *a, PyObject *b) {
    int r;
    if (a == b) return 1;
    Py_INCREF(a);
    Py_INCREF(b);
    r = PyObject_RichCompareBool(a, b, Py_EQ);
    Py_DECREF(a);
    Py_DECREF(b);
    return r;
}

/* 1 when the trees of root ids a and b (at ``shift``) hold the same keys with equal values, 0
 * when not, -1 on an error from a value's ``__eq__``.  Shared subtrees are equal without a look;
 * two trees of the same keys have the same shape (canonical), so a shape mismatch is a
 * difference.  The trees are maps' (they never change); records are re-read after each
 * ``__eq__`` (which may grow the tables). */
static int pm_equal(uint32_t a, uint32_t b, int shift) {
    uint32_t i, j;
    int r;
    pm_node *x, *y;
    if (a == b) return 1;
    if (a == 0 || b == 0) return 0;
    x = pm_t.slots[a].node;
    y = pm_t.slots[b].node;
    if (x->ndata != y->ndata || x->nchild != y->nchild || x->datamap != y->datamap || x->nodemap != y->nodemap)
        return 0;
    for (i = 0; i < x->ndata; i++) {
        uint32_t ra = pm_items(x)[i], rb = 0;
        if (ra == pm_items(y)[i]) continue;
        if (shift > PM_MAX_SHIFT) {
            for (j = 0; j < y->ndata; j++)
                if (pm_key_eq(pm_t.recs[ra].key, pm_t.recs[pm_items(y)[j]].key)) rb = pm_items(y)[j];
            if (rb == 0) return 0;
        } else {
            rb = pm_items(y)[i];
            if (pm_t.recs[ra].hash != pm_t.recs[rb].hash || !pm_key_eq(pm_t.recs[ra].key, pm_t.recs[rb].key))
                return 0;
        }
        r = pm_values_equal(pm_t.recs[ra].value, pm_t.recs[rb].value);
        if (r != 1) return r;
    }
    for (i = 0; i < x->nchild; i++) {
        r = pm_equal(pm_kids(x)[i], pm_kids(y)[i], shift + 5);
        if (r != 1) return r;
    }
    return 1;
}

/* ------------------------------------------------------------------ prefetching a group */

static inline void pm_prefetch_node(const pm_node *n) {
    __builtin_prefetch(n, 1, 3);
    __builtin_prefetch((const char *)n + 64, 1, 3);
}

/* One step of a walk toward the slot of ``hash``, for keys walked side by side (a group, or a
 * software pipeline), each step touching only what the step before prefetched.  ``*phase`` 0:
 * node ``id``'s table entries are in the cache: prefetch its memory.  ``*phase`` 1: its memory
 * is in the cache: if it is shared (the write will copy it, bumping the counts of everything it
 * holds) prefetch those counts; then on a child prefetch the child's table entries and return
 * its id (phase 0 again), on the key's entry prefetch its record and return 0 (0 too at an
 * empty slot or a collision node).  Reads only; a stale id (freed since) ends the walk. */
static inline uint32_t pm_walk_step(uint32_t id, int *phase, int *shift, uint64_t hash) {
    pm_node *n = pm_t.slots[id].node;
    uint32_t bit, kid, r, i, *items;
    if (n == NULL) return 0;
    if (*phase == 0) {
        pm_prefetch_node(n);
        *phase = 1;
        return id;
    }
    items = pm_items(n);
    if (pm_t.slots[id].refs != 1) {
        for (i = 0; i < n->ndata; i++) __builtin_prefetch(&pm_t.recs[items[i]].refs, 1, 3);
        for (; i < n->ndata + n->nchild; i++) __builtin_prefetch(&pm_t.slots[items[i]].refs, 1, 3);
    }
    if (*shift > PM_MAX_SHIFT) return 0;
    bit = pm_bit(hash, *shift);
    if (n->nodemap & bit) {
        kid = pm_kids(n)[pm_index(n->nodemap, bit)];
        __builtin_prefetch(&pm_t.slots[kid], 1, 3);
        *shift += 5;
        *phase = 0;
        return kid;
    }
    if (n->datamap & bit) {
        r = items[pm_index(n->datamap, bit)];
        __builtin_prefetch(&pm_t.recs[r], 0, 3);
    }
    return 0;
}

/* Counts for tests and memory figures: live nodes, live records, bytes of node memory. */
static void pm_stats(Py_ssize_t *nodes, Py_ssize_t *recs, Py_ssize_t *node_bytes) {
    uint32_t i;
    Py_ssize_t n = 0, r = 0, b = 0;
    for (i = 1; i < pm_t.node_top; i++) {
        pm_node *x = pm_t.slots[i].node;
        if (x != NULL) {
            n++;
            b += (Py_ssize_t)(sizeof(pm_node) + (size_t)(x->ndata + x->nchild) * sizeof(uint32_t));
        }
    }
    for (i = 1; i < pm_t.rec_top; i++)
        if (pm_t.recs[i].key != NULL) r++;
    *nodes = n;
    *recs = r;
    *node_bytes = b;
}

#endif /* KRAFT_PMAP_H */
