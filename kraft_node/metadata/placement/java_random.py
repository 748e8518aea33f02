"""The three pieces of the JDK that Kafka's replica placement depends on, reproduced so that
the placer makes the same choices as Kafka's for the same seed: ``java.util.Random``,
``Collections.shuffle`` and the iteration order of a ``HashMap<Optional<String>, _>``.

Why exactness matters: Kafka's placement tests pin exact replica lists produced with
``MockRandom`` (a ``Random`` whose generator is replaced by a fixed 64-bit LCG, seed 17), and a
port that draws its random numbers differently -- or iterates racks in another order, since
each rack's initial offsets are drawn in the map's order -- reproduces none of them.

``java.util.Random`` (the JDK's documented algorithm, unchanged since 1.0):

* state: 48 bits; ``Random(seed)`` stores ``(seed ^ 0x5DEECE66D) mod 2**48``;
* ``next(bits)``: ``state = (state * 0x5DEECE66D + 0xB) mod 2**48``, answer the top ``bits`` of
  the 48, as a signed 32-bit int;
* ``nextInt(bound)``: ``r = next(31)``; a power-of-two bound takes the top bits
  (``bound * r >> 31``); any other takes ``u % bound`` of the first draw ``u`` for which
  ``u - u % bound + (bound - 1)`` does not overflow a signed 32-bit int (rejection, so every
  residue is equally likely).

Kafka's ``MockRandom`` keeps all of ``Random`` but ``next(bits)``: a 64-bit state (17 unless
given), ``state = state * 2862933555777941757 + 3037000493 mod 2**64``, answer
``(int)(state >>> (64 - bits))``.  Both are one shape, an LCG of ``width`` bits whose top bits
are the answer, so :class:`JavaRandom` holds ``(multiplier, addend, width)`` as class constants
and :class:`MockRandom` only changes them: the native placement kernel
(``kraft_node._native._placement``) can then run either generator on a copy of the state and
hand the state back, and the placer's random advances exactly as if Python had drawn.

``Collections.shuffle(list, rnd)`` on a random-access list: for ``i`` from ``size`` down to 2,
swap element ``i - 1`` with element ``rnd.nextInt(i)``.

``HashMap`` order: see :func:`hash_map_order`.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, MutableSequence
from functools import lru_cache
from typing import TypeVar

__all__ = [
    "JavaRandom",
    "MockRandom",
    "java_shuffle",
    "java_string_hash",
    "optional_string_hash",
    "hash_map_order",
    "java_string_compare_key",
    "sorted_optional_strings",
]

_T = TypeVar("_T")

_INT_MAX = (1 << 31) - 1


def _int32(value: int) -> int:
    """``value`` reduced to Java's signed 32-bit ``int`` (two's complement wrap)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


class JavaRandom:
    """``java.util.Random``: the same numbers as the JDK's for the same seed.

    The generator is the class's LCG (``MULTIPLIER``, ``ADDEND``, ``WIDTH`` bits of state);
    ``state`` is its current value (``0 <= state < 2**WIDTH``).  A subclass may change the
    three constants (:class:`MockRandom`) or override :meth:`next`; only the former can run in
    the native placement kernel (:meth:`is_lcg` says which)."""

    MULTIPLIER = 0x5DEECE66D
    ADDEND = 0xB
    WIDTH = 48

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        # Random(long seed): the seed is scrambled with the multiplier, as the JDK does.
        self.state = (seed ^ self.MULTIPLIER) & ((1 << self.WIDTH) - 1)

    @classmethod
    def is_lcg(cls) -> bool:
        """True when this class draws with the plain LCG (``next`` not overridden), so a kernel
        that knows ``(MULTIPLIER, ADDEND, WIDTH)`` and ``state`` draws what it would."""
        return cls.next is JavaRandom.next

    def next(self, bits: int) -> int:
        """Java's ``protected int next(int bits)``: advance, answer the top ``bits`` bits."""
        width = self.WIDTH
        self.state = (self.state * self.MULTIPLIER + self.ADDEND) & ((1 << width) - 1)
        return _int32(self.state >> (width - bits))

    def next_int(self, bound: int | None = None) -> int:
        """``nextInt()`` (any int) or ``nextInt(bound)`` (``0 <= r < bound``), as the JDK draws."""
        if bound is None:
            return self.next(32)
        if bound <= 0:
            raise ValueError(f"bound must be positive, got {bound}")
        if bound > _INT_MAX:
            raise ValueError(f"bound {bound} does not fit a Java int")
        r = self.next(31)
        m = bound - 1
        if bound & m == 0:  # a power of two: the top bits
            return (bound * r) >> 31
        u = r
        r = u % bound
        while u - r + m > _INT_MAX:  # Java: u - r + m < 0 after int overflow
            u = self.next(31)
            r = u % bound
        return r

    def next_long(self) -> int:
        """``nextLong()``: two 32-bit draws, the first the high half (signed 64-bit result)."""
        value = (self.next(32) << 32) + self.next(32)
        value &= (1 << 64) - 1
        return value - (1 << 64) if value >> 63 else value

    def next_boolean(self) -> bool:
        """``nextBoolean()``."""
        return self.next(1) != 0

    def next_double(self) -> float:
        """``nextDouble()``: 53 random bits (26 then 27) scaled to ``[0, 1)``."""
        return ((self.next(26) << 27) + self.next(27)) * (1.0 / (1 << 53))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(state={self.state:#x})"


class MockRandom(JavaRandom):
    """Kafka's test ``MockRandom`` (``server-common``'s ``org.apache.kafka.server.util``): the
    whole of ``java.util.Random`` over a 64-bit LCG whose state starts at the given value
    (17 by default) with no scrambling."""

    MULTIPLIER = 2862933555777941757
    ADDEND = 3037000493
    WIDTH = 64

    __slots__ = ()

    def __init__(self, state: int = 17) -> None:
        # MockRandom(long state) keeps the long as it is: a negative one is its two's complement.
        self.state = state & ((1 << 64) - 1)


def java_shuffle(items: MutableSequence[_T], random: JavaRandom) -> None:
    """``Collections.shuffle(items, random)`` in place, drawing as the JDK does (random-access
    lists: swap ``i - 1`` with ``nextInt(i)`` for ``i = size .. 2``)."""
    for i in range(len(items), 1, -1):
        j = random.next_int(i)
        items[i - 1], items[j] = items[j], items[i - 1]


# -- String.hashCode, String.compareTo ------------------------------------------------------


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over the UTF-16 code units, in
    32-bit int arithmetic (so a character beyond the BMP counts as its two surrogates)."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def optional_string_hash(value: str | None) -> int:
    """``Optional<String>.hashCode()``: the string's hash, 0 for ``Optional.empty()``."""
    return 0 if value is None else java_string_hash(value)


def java_string_compare_key(text: str) -> bytes:
    """A sort key ordering strings as ``String.compareTo`` does: by UTF-16 code unit, not by
    code point (the two differ when a supplementary character meets one in U+E000..U+FFFF).
    Big-endian UTF-16 bytes compare unit by unit, a prefix first."""
    return text.encode("utf-16-be", "surrogatepass")


# -- HashMap iteration order ------------------------------------------------------------------
#
# java.util.HashMap (JDK 8 and later; the placer's map is `new HashMap<>()`):
# * hash(key) = h ^ (h >>> 16) with h = key.hashCode(); bucket = hash & (capacity - 1).
# * the table is made on the first put with capacity 16 and doubles when, after a put, the size
#   exceeds capacity * 0.75 (12, 24, 48, ...).  On resize a bucket splits in two keeping its
#   relative order: the entries with (hash & oldCapacity) == 0 stay at j, the others move to
#   j + oldCapacity.
# * a bucket is a linked list, new keys appended.  When an append makes it 9 long (TREEIFY
#   threshold 8) the map resizes instead if capacity < 64, else the bucket becomes a red-black
#   tree ordered by hash.  A tree bucket's iteration follows its own `next` links: building the
#   tree, and each insertion (which links the new node right after its tree parent), moves the
#   tree's root to the front of that list.  A resize splits a tree bucket like a list; a half of
#   6 or fewer entries becomes a plain list again, a larger half that shares the bucket's old
#   entries with the other half is rebuilt as a tree.
# * iteration: buckets in index order, each bucket along its `next` links.
# Between tree entries of *equal* hash Java's order is decided by System.identityHashCode,
# i.e. it differs from run to run; here the newer entry goes left (a valid Java outcome).

_DEFAULT_CAPACITY = 16
_TREEIFY_THRESHOLD = 8
_UNTREEIFY_THRESHOLD = 6
_MIN_TREEIFY_CAPACITY = 64


class TreeNode:
    """One ``java.util.HashMap`` entry: the list link (``next``/``prev``) and, in a tree bucket,
    the red-black tree links (``parent``/``left``/``right``/``red``).  Shared with the
    partition-change builder's ``HashSet<Integer>`` order (``controller/partition_change.py``)
    through :func:`balance_insertion`, :func:`rotate_left` and :func:`rotate_right`, Java's
    ``TreeNode`` steps."""

    __slots__ = ("hash", "key", "position", "next", "prev", "parent", "left", "right", "red")

    def __init__(self, hash_: int, key: Hashable, position: int) -> None:
        self.hash = hash_  # the spread hash, as a signed int (the tree compares it signed)
        self.key = key
        self.position = position  # index of the key in the insertion sequence
        self.next: TreeNode | None = None
        self.prev: TreeNode | None = None
        self.parent: TreeNode | None = None
        self.left: TreeNode | None = None
        self.right: TreeNode | None = None
        self.red = False


def _chain(head: TreeNode | None) -> list[TreeNode]:
    out = []
    while head is not None:
        out.append(head)
        head = head.next
    return out


def _link(nodes: list[TreeNode]) -> TreeNode | None:
    """Link ``nodes`` as a list in this order (tree links cleared); answer its head."""
    prev: TreeNode | None = None
    for node in nodes:
        node.prev = prev
        node.next = None
        if prev is not None:
            prev.next = node
        prev = node
    return nodes[0] if nodes else None


class _JavaHashMap:
    """Just enough of ``java.util.HashMap`` to know where its keys sit: insertions of new keys
    (the placer never removes), resizes, and tree buckets with their red-black balancing."""

    def __init__(self) -> None:
        self.table: list[TreeNode | None] = []
        self.tree: list[bool] = []  # per bucket: a tree bucket?
        self.size = 0
        self.threshold = 0

    # -- the table --------------------------------------------------------------------------

    def resize(self) -> None:
        old = self.table
        old_trees = self.tree
        old_cap = len(old)
        new_cap = old_cap * 2 if old_cap else _DEFAULT_CAPACITY
        self.threshold = new_cap * 3 // 4
        self.table = [None] * new_cap
        self.tree = [False] * new_cap
        for j in range(old_cap):
            nodes = _chain(old[j])
            if not nodes:
                continue
            if len(nodes) == 1:
                self.table[nodes[0].hash & (new_cap - 1)] = _link(nodes)
                continue
            lo = [n for n in nodes if n.hash & old_cap == 0]
            hi = [n for n in nodes if n.hash & old_cap != 0]
            if not old_trees[j]:
                self.table[j] = _link(lo)
                self.table[j + old_cap] = _link(hi)
                continue
            for index, half, other in ((j, lo, hi), (j + old_cap, hi, lo)):
                if not half:
                    continue
                if len(half) <= _UNTREEIFY_THRESHOLD:
                    self.table[index] = _link(half)
                elif not other:  # the whole tree moved as it is: links and root unchanged
                    self.table[index] = half[0]
                    self.tree[index] = True
                else:
                    self.table[index] = _link(half)
                    self._treeify(index)

    def put_absent(self, key: Hashable, hash_: int, position: int) -> None:
        """Insert ``key`` (not yet in the map) with spread hash ``hash_``."""
        if not self.table:
            self.resize()
        n = len(self.table)
        i = hash_ & (n - 1)
        head = self.table[i]
        node = TreeNode(_to_signed(hash_), key, position)
        if head is None:
            self.table[i] = node
        elif self.tree[i]:
            self._put_tree(i, node)
        else:
            tail = head
            count = 1
            while tail.next is not None:
                tail = tail.next
                count += 1
            tail.next = node
            node.prev = tail
            if count >= _TREEIFY_THRESHOLD:  # the bucket is now 9 or more long
                if n < _MIN_TREEIFY_CAPACITY:
                    self.resize()
                else:
                    self._treeify(i)
        self.size += 1
        if self.size > self.threshold:
            self.resize()

    def order(self) -> list[int]:
        """Insertion positions of the keys in iteration order."""
        return [node.position for head in self.table for node in _chain(head)]

    # -- tree buckets -----------------------------------------------------------------------

    def _treeify(self, index: int) -> None:
        nodes = _chain(self.table[index])
        root: TreeNode | None = None
        for x in nodes:
            x.left = x.right = None
            if root is None:
                x.parent = None
                x.red = False
                root = x
                continue
            p = root
            while True:
                go_left = _goes_left(x.hash, p.hash)
                child = p.left if go_left else p.right
                if child is None:
                    x.parent = p
                    if go_left:
                        p.left = x
                    else:
                        p.right = x
                    root = balance_insertion(root, x)
                    break
                p = child
        self.tree[index] = True
        assert root is not None
        self._move_root_to_front(index, root)

    def _put_tree(self, index: int, x: TreeNode) -> None:
        root = self.table[index]
        assert root is not None and root.parent is None  # the root is kept at the front
        p = root
        while True:
            go_left = _goes_left(x.hash, p.hash)
            child = p.left if go_left else p.right
            if child is None:
                after = p.next  # the new node is linked right after its tree parent
                if go_left:
                    p.left = x
                else:
                    p.right = x
                p.next = x
                x.parent = x.prev = p
                x.next = after
                if after is not None:
                    after.prev = x
                self._move_root_to_front(index, balance_insertion(root, x))
                return
            p = child

    def _move_root_to_front(self, index: int, root: TreeNode) -> None:
        first = self.table[index]
        if root is first:
            return
        self.table[index] = root
        if root.next is not None:
            root.next.prev = root.prev
        if root.prev is not None:
            root.prev.next = root.next
        if first is not None:
            first.prev = root
        root.next = first
        root.prev = None


def _to_signed(h: int) -> int:
    return _int32(h)


def _goes_left(new_hash: int, node_hash: int) -> bool:
    """Tree order: by signed hash; equal hashes (no order for Optional, which is not
    Comparable) fall to Java's identity-hash tie-break, taken here as "left"."""
    if node_hash > new_hash:
        return True
    if node_hash < new_hash:
        return False
    return True


def rotate_left(root: TreeNode, p: TreeNode) -> TreeNode:
    r = p.right
    if r is None:
        return root
    p.right = r.left
    if r.left is not None:
        r.left.parent = p
    r.parent = p.parent
    if p.parent is None:
        root = r
        r.red = False
    elif p.parent.left is p:
        p.parent.left = r
    else:
        p.parent.right = r
    r.left = p
    p.parent = r
    return root


def rotate_right(root: TreeNode, p: TreeNode) -> TreeNode:
    left = p.left
    if left is None:
        return root
    p.left = left.right
    if left.right is not None:
        left.right.parent = p
    left.parent = p.parent
    if p.parent is None:
        root = left
        left.red = False
    elif p.parent.right is p:
        p.parent.right = left
    else:
        p.parent.left = left
    left.right = p
    p.parent = left
    return root


def balance_insertion(root: TreeNode, x: TreeNode) -> TreeNode:
    """Red-black fix-up after inserting ``x``; answers the (possibly new) root.  The same case
    analysis, in the same order, as the JDK's ``HashMap.TreeNode.balanceInsertion`` -- the root
    it ends with decides the bucket's iteration order."""
    x.red = True
    while True:
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        xpp = xp.parent
        if not xp.red or xpp is None:
            return root
        if xp is xpp.left:
            uncle = xpp.right
            if uncle is not None and uncle.red:
                uncle.red = False
                xp.red = False
                xpp.red = True
                x = xpp
                continue
            if x is xp.right:
                x = xp
                root = rotate_left(root, x)
                xp = x.parent
                xpp = None if xp is None else xp.parent
            if xp is not None:
                xp.red = False
                if xpp is not None:
                    xpp.red = True
                    root = rotate_right(root, xpp)
        else:
            uncle = xpp.left
            if uncle is not None and uncle.red:
                uncle.red = False
                xp.red = False
                xpp.red = True
                x = xpp
                continue
            if x is xp.left:
                x = xp
                root = rotate_right(root, x)
                xp = x.parent
                xpp = None if xp is None else xp.parent
            if xp is not None:
                xp.red = False
                if xpp is not None:
                    xpp.red = True
                    root = rotate_left(root, xpp)


def _spread(h: int) -> int:
    """``HashMap.hash``: ``h ^ (h >>> 16)`` as an unsigned 32-bit value."""
    h &= 0xFFFFFFFF
    return h ^ (h >> 16)


@lru_cache(maxsize=1024)
def _order(keys: tuple[str | None, ...]) -> tuple[int, ...]:
    if len(set(keys)) != len(keys):
        raise ValueError(f"hash_map_order needs distinct keys, got {keys!r}")
    table = _JavaHashMap()
    for position, key in enumerate(keys):
        table.put_absent(key, _spread(optional_string_hash(key)), position)
    return tuple(table.order())


def hash_map_order(keys: Iterable[str | None]) -> tuple[int, ...]:
    """The order in which a ``new HashMap<Optional<String>, V>()`` that was given ``keys``
    (distinct, ``None`` for ``Optional.empty()``) in this order iterates them: the indexes
    of ``keys``, in iteration order.  Cached per key sequence (a cluster's racks rarely change,
    and the placer asks once per topic)."""
    return _order(tuple(keys))


def sorted_optional_strings(keys: Iterable[str | None]) -> list[str | None]:
    """``keys`` sorted as Kafka's ``OptionalStringComparator``: empty first, then by
    ``String.compareTo``."""
    return sorted(keys, key=lambda k: (0, b"") if k is None else (1, java_string_compare_key(k)))
