"""RFC 9162 Merkle trees: a tenant's ledger as a log with logarithmic proofs.

A hash chain proves an entry only by replaying everything after it, so one
job's evidence grows with the tenant's whole later history. A Merkle tree in
the construction of RFC 9162 section 2.1 (Certificate Transparency v2; the
same hashing as RFC 6962 and the C2SP tlog specifications) proves that an
entry is in the log, and that a later log extends an earlier one, with
O(log n) hashes each. Following the RFC byte for byte lets anyone check
Quire's evidence with an existing transparency-log library.

    leaf hash   SHA-256(0x00 || entry bytes)
    node hash   SHA-256(0x01 || left || right)
    MTH({})     SHA-256("")
    MTH(D[n])   node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two < n

Sizes count leaves; indices start at 0. Verification raises ``ProofError``
rather than returning a flag, so a forgotten check fails closed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MerkleTree",
    "ProofError",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"


class ProofError(ValueError):
    """A proof, root or size does not prove what it claims."""


def leaf_hash(entry: bytes) -> bytes:
    """The leaf hash of one entry's bytes (the 0x00 prefix keeps a leaf from
    ever being read as an interior node)."""
    return hashlib.sha256(_LEAF_PREFIX + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node over its two children."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def _split(width: int) -> int:
    """The largest power of two strictly smaller than ``width`` (>= 2)."""
    return 1 << ((width - 1).bit_length() - 1)


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class MerkleTree:
    """An append-only RFC 9162 tree that answers for any of its past sizes.

    It keeps every complete, aligned subtree hash, level by level, in one
    ``bytearray`` per level (about 64 bytes per leaf in all), so a root or a
    proof costs O(log^2 n) hashes however large the tree is, and appending a
    leaf costs O(1) amortised. A tree of size ``s`` reuses these same stored
    hashes, which is what lets one tree serve proofs against older checkpoints.
    """

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[bytearray] = [bytearray()]
        self._size = 0
        for leaf in leaf_hashes:
            self.append(leaf)

    @classmethod
    def from_entries(cls, entries: Iterable[bytes]) -> MerkleTree:
        """A tree over raw entries (hashed here with the leaf prefix)."""
        return cls(leaf_hash(entry) for entry in entries)

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    def append(self, leaf: bytes) -> int:
        """Append one leaf hash; returns its index."""
        _check_hash(leaf, "leaf hash")
        index = self._size
        self._levels[0] += leaf
        height, count = 0, index + 1
        while count % 2 == 0:  # this level just completed a pair: hash it up
            level = self._levels[height]
            parent = node_hash(bytes(level[-64:-32]), bytes(level[-32:]))
            if height + 1 == len(self._levels):
                self._levels.append(bytearray())
            self._levels[height + 1] += parent
            height, count = height + 1, count // 2
        self._size += 1
        return index

    def leaf(self, index: int) -> bytes:
        """The leaf hash stored at ``index``."""
        if not 0 <= index < self._size:
            raise IndexError(f"leaf {index} outside a tree of {self._size}")
        return bytes(self._levels[0][index * HASH_SIZE : (index + 1) * HASH_SIZE])

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first ``size`` leaves (default: all of them)."""
        size = self._checked_size(size)
        return self._subtree(0, size) if size else EMPTY_ROOT

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[0:size]) of RFC 9162 2.1.3.1, leaf-side hash first."""
        size = self._checked_size(size)
        if not 0 <= index < size:
            raise ValueError(f"leaf {index} outside a tree of {size}")
        proof: list[bytes] = []
        start, end, m = 0, size, index
        while end - start > 1:
            k = _split(end - start)
            if m < k:
                proof.append(self._subtree(start + k, end))
                end = start + k
            else:
                proof.append(self._subtree(start, start + k))
                start, m = start + k, m - k
        proof.reverse()  # gathered root-side first; the RFC lists leaf-side first
        return proof

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """PROOF(old_size, D[0:new_size]) of RFC 9162 2.1.4.1.

        Empty when ``old_size`` is 0 or equals ``new_size``: there is nothing
        to prove, and the verifier compares roots instead.
        """
        new_size = self._checked_size(new_size)
        if not 0 <= old_size <= new_size:
            raise ValueError(f"old size {old_size} outside 0..{new_size}")
        if old_size in (0, new_size):
            return []
        proof: list[bytes] = []
        start, end, m, whole = 0, new_size, old_size, True
        while m != end - start:  # SUBPROOF(m, D[start:end], whole)
            k = _split(end - start)
            if m <= k:
                proof.append(self._subtree(start + k, end))
                end = start + k
            else:
                proof.append(self._subtree(start, start + k))
                start, m, whole = start + k, m - k, False
        if not whole:
            proof.append(self._subtree(start, end))
        proof.reverse()
        return proof

    def _checked_size(self, size: int | None) -> int:
        if size is None:
            return self._size
        if not 0 <= size <= self._size:
            raise ValueError(f"size {size} outside a tree of {self._size}")
        return size

    def _subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for 0 <= start < end <= size.

        A complete subtree aligned on its own width is stored; any other range
        splits as the RFC does. The ranges proofs ask for always start on such
        a boundary, so each call reads at most one stored hash per level.
        """
        width = end - start
        if _is_power_of_two(width) and start % width == 0:
            height = width.bit_length() - 1
            offset = (start >> height) * HASH_SIZE
            return bytes(self._levels[height][offset : offset + HASH_SIZE])
        k = _split(width)
        return node_hash(self._subtree(start, start + k), self._subtree(start + k, end))


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over ``leaf_hashes``."""
    return MerkleTree(leaf_hashes).root()


def inclusion_proof(index: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """The inclusion proof of leaf ``index`` in the tree over ``leaf_hashes``."""
    return MerkleTree(leaf_hashes).inclusion_proof(index)


def consistency_proof(old_size: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """The proof that the tree over ``leaf_hashes`` extends its first ``old_size`` leaves."""
    return MerkleTree(leaf_hashes).consistency_proof(old_size)


def verify_inclusion(
    leaf_hash: bytes, index: int, tree_size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``tree_size`` with
    ``root``, by the algorithm of RFC 9162 2.1.3.2. Raises ``ProofError``."""
    _check_hash(leaf_hash, "leaf hash")
    _check_hash(root, "root")
    _check_proof(proof)
    if not 0 <= index < tree_size:
        raise ProofError(f"leaf {index} outside a tree of {tree_size}")
    fn, sn, r = index, tree_size - 1, leaf_hash
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("inclusion proof is too short")
    if r != root:
        raise ProofError("inclusion proof does not lead to the root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``new_size`` with ``new_root`` extends the tree of
    ``old_size`` with ``old_root``, by RFC 9162 2.1.4.2. Raises ``ProofError``.

    The RFC's algorithm covers 0 < old_size < new_size. Outside it the proof
    must be empty: equal sizes need equal roots, and an empty old tree must
    have the empty tree's root (it is a prefix of every tree).
    """
    _check_hash(old_root, "old root")
    _check_hash(new_root, "new root")
    _check_proof(proof)
    if not 0 <= old_size <= new_size:
        raise ProofError(f"old size {old_size} is not within 0..{new_size}")
    if old_size == 0 or old_size == new_size:
        _verify_trivial_consistency(old_size, new_size, old_root, new_root, proof)
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    path = list(proof)
    if _is_power_of_two(old_size):
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("consistency proof is too short")
    if fr != old_root:
        raise ProofError("consistency proof does not lead to the old root")
    if sr != new_root:
        raise ProofError("consistency proof does not lead to the new root")


def _verify_trivial_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    if proof:
        raise ProofError(f"a consistency proof from {old_size} to {new_size} must be empty")
    if old_size == 0 and old_root != EMPTY_ROOT:
        raise ProofError("the old root is not the empty tree's root")
    if old_size == new_size and old_root != new_root:
        raise ProofError("trees of one size have different roots")


def _check_hash(value: bytes, what: str) -> None:
    if not isinstance(value, bytes | bytearray) or len(value) != HASH_SIZE:
        raise ProofError(f"{what} is not a {HASH_SIZE}-byte hash")


def _check_proof(proof: Sequence[bytes]) -> None:
    for element in proof:
        _check_hash(element, "proof element")
