"""The RFC 9162 Merkle tree: roots and proofs match the RFC's own recursive
definitions and the Certificate Transparency test vectors, every honest proof
verifies, and a proof, root, leaf, index or size that was changed does not."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quire.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

MAX_SIZE = 300


def h(hex_digest: str) -> bytes:
    return bytes.fromhex(hex_digest)


# The Certificate Transparency test vectors, as kept by transparency-dev/merkle
# (testonly/constants.go and proof/verify_test.go): leaf inputs, the root of
# every prefix of them, and proofs between them.
CT_LEAVES = [h(x) for x in ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                            "606162636465666768696a6b6c6d6e6f"]]  # fmt: skip
CT_ROOTS = [h(x) for x in [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]]  # fmt: skip
# (leaf index, tree size, proof); verify_test.go numbers leaves from 1.
CT_INCLUSION = [
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]  # fmt: skip
# (old size, new size, proof)
CT_CONSISTENCY = [
    (1, 1, []),
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (6, 7, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]  # fmt: skip


# -- the RFC 9162 definitions, written out recursively as the RFC states them --


def ref_leaf(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def ref_node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def ref_split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = ref_split(len(leaves))
    return ref_node(ref_mth(leaves[:k]), ref_mth(leaves[k:]))


def ref_path(m: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = ref_split(len(leaves))
    if m < k:
        return ref_path(m, leaves[:k]) + [ref_mth(leaves[k:])]
    return ref_path(m - k, leaves[k:]) + [ref_mth(leaves[:k])]


def ref_subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    if m == len(leaves):
        return [] if whole else [ref_mth(leaves)]
    k = ref_split(len(leaves))
    if m <= k:
        return ref_subproof(m, leaves[:k], whole) + [ref_mth(leaves[k:])]
    return ref_subproof(m - k, leaves[k:], False) + [ref_mth(leaves[:k])]


def leaves_of(size: int) -> list[bytes]:
    return [ref_leaf(b"entry %d" % i) for i in range(size)]


@st.composite
def size_and_index(draw: st.DrawFn) -> tuple[int, int]:
    size = draw(st.integers(min_value=1, max_value=MAX_SIZE))
    return size, draw(st.integers(min_value=0, max_value=size - 1))


@st.composite
def two_sizes(draw: st.DrawFn) -> tuple[int, int]:
    new = draw(st.integers(min_value=2, max_value=MAX_SIZE))
    return draw(st.integers(min_value=1, max_value=new - 1)), new


def flipped(proof: list[bytes], i: int) -> list[bytes]:
    changed = list(proof)
    changed[i] = bytes([changed[i][0] ^ 8]) + changed[i][1:]
    return changed


# -- known answers ------------------------------------------------------------


def test_empty_tree_root_is_sha256_of_nothing() -> None:
    assert EMPTY_ROOT == hashlib.sha256(b"").digest() == CT_ROOTS[0]
    assert root([]) == EMPTY_ROOT
    assert MerkleTree().root() == EMPTY_ROOT


def test_roots_match_the_certificate_transparency_vectors() -> None:
    tree = MerkleTree.from_entries(CT_LEAVES)
    for size, expected in enumerate(CT_ROOTS):
        assert tree.root(size) == expected
        assert root([leaf_hash(e) for e in CT_LEAVES[:size]]) == expected


@pytest.mark.parametrize(("index", "size", "proof"), CT_INCLUSION)
def test_inclusion_proofs_match_the_certificate_transparency_vectors(
    index: int, size: int, proof: list[str]
) -> None:
    expected = [h(x) for x in proof]
    tree = MerkleTree.from_entries(CT_LEAVES)
    assert tree.inclusion_proof(index, size) == expected
    verify_inclusion(leaf_hash(CT_LEAVES[index]), index, size, expected, CT_ROOTS[size])


@pytest.mark.parametrize(("old", "new", "proof"), CT_CONSISTENCY)
def test_consistency_proofs_match_the_certificate_transparency_vectors(
    old: int, new: int, proof: list[str]
) -> None:
    expected = [h(x) for x in proof]
    tree = MerkleTree.from_entries(CT_LEAVES)
    assert tree.consistency_proof(old, new) == expected
    verify_consistency(old, new, CT_ROOTS[old], CT_ROOTS[new], expected)


# -- every honest proof is the RFC's, and verifies ------------------------------


@settings(max_examples=300, deadline=None)
@given(size_and_index())
def test_every_inclusion_proof_is_the_rfc_path_and_verifies(case: tuple[int, int]) -> None:
    size, index = case
    leaves = leaves_of(size)
    proof = inclusion_proof(index, leaves)
    assert proof == ref_path(index, leaves)
    verify_inclusion(leaves[index], index, size, proof, ref_mth(leaves))


@settings(max_examples=300, deadline=None)
@given(two_sizes())
def test_every_consistency_proof_is_the_rfc_proof_and_verifies(case: tuple[int, int]) -> None:
    old, new = case
    leaves = leaves_of(new)
    proof = consistency_proof(old, leaves)
    assert proof == ref_subproof(old, leaves, True)
    verify_consistency(old, new, ref_mth(leaves[:old]), ref_mth(leaves), proof)


def test_one_tree_answers_for_every_past_size() -> None:
    leaves = leaves_of(70)
    tree = MerkleTree()
    for i, leaf in enumerate(leaves):
        assert tree.append(leaf) == i
    for size in range(71):
        assert tree.root(size) == ref_mth(leaves[:size])
        for old in range(size + 1):
            proof = tree.consistency_proof(old, size)
            verify_consistency(old, size, tree.root(old), tree.root(size), proof)
    for index in range(70):
        assert tree.inclusion_proof(index, 70) == ref_path(index, leaves)
        assert tree.leaf(index) == leaves[index]


def test_trivial_consistency_needs_no_proof() -> None:
    some = ref_mth(leaves_of(3))
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    verify_consistency(0, 3, EMPTY_ROOT, some, [])
    verify_consistency(3, 3, some, some, [])
    assert consistency_proof(0, leaves_of(3)) == []
    assert consistency_proof(3, leaves_of(3)) == []


def test_a_proof_at_100000_leaves_has_17_hashes() -> None:
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(100_000)]
    tree = MerkleTree(leaves)
    proof = tree.inclusion_proof(54_321)
    assert len(proof) == 17  # ceil(log2(100000))
    verify_inclusion(leaves[54_321], 54_321, 100_000, proof, tree.root())
    old_root = tree.root(65_537)
    verify_consistency(65_537, 100_000, old_root, tree.root(), tree.consistency_proof(65_537))


# -- nothing changed verifies -------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(size_and_index())
def test_a_tampered_inclusion_proof_fails(case: tuple[int, int]) -> None:
    size, index = case
    leaves = leaves_of(size)
    tree_root = ref_mth(leaves)
    proof = ref_path(index, leaves)
    leaf = leaves[index]
    other = ref_leaf(b"not in the log")
    probes: list[tuple[bytes, int, int, list[bytes], bytes]] = [
        (other, index, size, proof, tree_root),
        (leaf, index, size, proof, other),
        (leaf, index, size, proof, EMPTY_ROOT),
        (leaf, index, size, [*proof, tree_root], tree_root),
        (leaf, index, size, [tree_root, *proof], tree_root),
        (leaf, index, size * 2, proof, tree_root),
        (leaf, index + size, size * 2, proof, tree_root),
    ]
    probes += [(leaf, index, size, flipped(proof, i), tree_root) for i in range(len(proof))]
    if proof:
        probes.append((leaf, index, size, proof[:-1], tree_root))
        probes.append((leaf, index, size, proof[1:], tree_root))
    if size > 1:
        probes.append((leaf, (index + 1) % size, size, proof, tree_root))
        probes.append((leaf, index, size // 2, proof, tree_root))
    for probe in probes:
        with pytest.raises(ProofError):
            verify_inclusion(*probe)


@settings(max_examples=200, deadline=None)
@given(two_sizes())
def test_a_tampered_consistency_proof_fails(case: tuple[int, int]) -> None:
    old, new = case
    leaves = leaves_of(new)
    old_root, new_root = ref_mth(leaves[:old]), ref_mth(leaves)
    proof = ref_subproof(old, leaves, True)
    other = ref_leaf(b"not a root")
    probes: list[tuple[int, int, bytes, bytes, list[bytes]]] = [
        (old, new, other, new_root, proof),
        (old, new, old_root, other, proof),
        (old, new, new_root, old_root, proof),
        (old, new, old_root, new_root, []),
        (old, new, old_root, new_root, proof[:-1]),
        (old, new, old_root, new_root, [*proof, new_root]),
        (old, new, old_root, new_root, [old_root, *proof]),
        (old, new * 2, old_root, new_root, proof),
        (new, old, new_root, old_root, proof),
        (0, new, old_root, new_root, proof),
    ]
    probes += [(old, new, old_root, new_root, flipped(proof, i)) for i in range(len(proof))]
    for probe in probes:
        with pytest.raises(ProofError):
            verify_consistency(*probe)


def test_sizes_and_indices_outside_the_tree_fail() -> None:
    leaves = leaves_of(5)
    tree_root = ref_mth(leaves)
    with pytest.raises(ProofError):
        verify_inclusion(leaves[0], 5, 5, ref_path(4, leaves), tree_root)
    with pytest.raises(ProofError):
        verify_inclusion(leaves[0], -1, 5, [], tree_root)
    with pytest.raises(ProofError):
        verify_inclusion(leaves[0], 0, 0, [], EMPTY_ROOT)
    with pytest.raises(ProofError):
        verify_consistency(0, 3, tree_root, tree_root, [])  # an empty tree has one root
    with pytest.raises(ProofError):
        verify_consistency(3, 3, tree_root, EMPTY_ROOT, [])
    with pytest.raises(ProofError):
        verify_inclusion(leaves[0][:31], 0, 1, [], leaves[0][:31])
    with pytest.raises(ValueError):
        MerkleTree(leaves).inclusion_proof(5)
    with pytest.raises(ValueError):
        MerkleTree(leaves).consistency_proof(6)
