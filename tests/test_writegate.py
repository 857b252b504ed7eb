"""The write gate (``backend.core.writegate``): a write into a user's folder goes nowhere else,
whatever links are planted before it, during it (a loop flipping a name between absent and
a link) or in place of a parent folder. Real files and real links; the victim's files are
compared byte for byte after every attempt."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from backend.core import writegate
from backend.core.writegate import WriteRefused


@pytest.fixture
def two_users(tmp_path):
    bob, alice = tmp_path / "datasets" / "bob", tmp_path / "datasets" / "alice"
    (bob / "set").mkdir(parents=True)
    (alice / "al").mkdir(parents=True)
    (alice / "al" / "al0.txt").write_text("alice's caption\n")
    (alice / "al" / "metadata.csv").write_text("image,prompt\nal0.png,alice's prompt\n")
    return bob, alice


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def flipping(path: Path, target: Path, as_dir: bool = False):
    """A thread that flips ``path`` between absent (or a real folder) and a link to
    ``target`` until stopped."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                if as_dir:
                    path.mkdir()
                    os.rmdir(path)
                path.symlink_to(target)
                path.unlink()
            except OSError:
                pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return stop, t


def test_a_planted_temp_name_or_destination_link_is_never_written_through(two_users):
    bob, alice = two_users
    before = snapshot(alice)
    gate = writegate.gate_of([bob])
    folder = bob / "set"
    # The temp names the old writers used, planted as links to alice's files.
    (folder / ".c0.txt.tmp").symlink_to(alice / "al" / "al0.txt")
    (folder / "c0.txt.tmp").symlink_to(alice / "al" / "al0.txt")
    (folder / ".metadata.csv.tmp").symlink_to(alice / "al" / "metadata.csv")
    gate.write_text(folder / "c0.txt", "bob's caption\n")
    gate.write_text(folder / "metadata.csv", "image,prompt\nc0.png,bob\n")
    assert (folder / "c0.txt").read_text() == "bob's caption\n"
    assert not (folder / "c0.txt").is_symlink()
    # The destination itself a link: refused, naming the file, nothing written.
    (folder / "c1.txt").symlink_to(alice / "al" / "al0.txt")
    with pytest.raises(WriteRefused, match=r"caption: is a link; a link is never written "
                                           r"through \(got '.*c1.txt'"):
        gate.write_text(folder / "c1.txt", "x", "caption")
    # Unrestricted (sign-in off, admins) writes are just as link-safe.
    with pytest.raises(WriteRefused, match="is a link"):
        writegate.atomic_write(folder / "c1.txt", "x")
    assert snapshot(alice) == before
    # No temp file is left behind.
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")
                  and not p.is_symlink()) == []


def test_outside_the_roots_and_through_a_parent_link_is_refused(two_users):
    bob, alice = two_users
    before = snapshot(alice)
    gate = writegate.gate_of([bob])
    with pytest.raises(WriteRefused, match="not writable here"):
        gate.write_text(alice / "al" / "al0.txt", "x")
    with pytest.raises(WriteRefused, match="not writable here"):
        gate.write_text(bob / ".." / "alice" / "al" / "al0.txt", "x")
    (bob / "linked").symlink_to(alice / "al")  # a folder of bob's that is a link
    with pytest.raises(WriteRefused, match="not writable here"):
        gate.write_text(bob / "linked" / "al0.txt", "x")
    with pytest.raises(WriteRefused):
        gate.makedirs(bob / "linked" / "deeper")
    # A root that is itself a link gives no writable folder at all.
    (bob.parent / "mallory").symlink_to(alice)
    with pytest.raises(WriteRefused):
        writegate.gate_of([bob.parent / "mallory"]).write_text(
            bob.parent / "mallory" / "al" / "al0.txt", "x")
    assert snapshot(alice) == before
    assert not (alice / "al" / "deeper").exists()


def test_a_name_flipped_to_a_link_in_a_loop_never_redirects_a_write(two_users):
    bob, alice = two_users
    before = snapshot(alice)
    gate = writegate.gate_of([bob])
    target = bob / "set" / "al0.txt"
    stop, t = flipping(target, alice / "al" / "al0.txt")
    written = refused = 0
    try:
        for i in range(400):
            try:
                gate.write_text(target, f"bob {i}\n")
                written += 1
            except WriteRefused:
                refused += 1
            except FileNotFoundError:
                refused += 1
            # Removing the file lets the loop plant its link again.
            try:
                if not target.is_symlink():
                    target.unlink()
            except OSError:
                pass
    finally:
        stop.set()
        t.join()
    assert written > 0
    assert snapshot(alice) == before


def test_a_parent_folder_flipped_to_a_link_in_a_loop_never_redirects_a_write(two_users):
    bob, alice = two_users
    before = snapshot(alice)
    gate = writegate.gate_of([bob])
    sub = bob / "swap"
    stop, t = flipping(sub, alice / "al", as_dir=True)
    try:
        for i in range(400):
            try:
                gate.write_text(sub / "al0.txt", f"bob {i}\n", parents=True)
                gate.write_text(sub / "metadata.csv", "image,prompt\n")
            except (WriteRefused, OSError):
                pass
            for name in ("al0.txt", "metadata.csv"):
                try:
                    if not sub.is_symlink():
                        (sub / name).unlink()
                except OSError:
                    pass
    finally:
        stop.set()
        t.join()
    assert snapshot(alice) == before


def test_create_never_truncates_and_cleans_up_after_a_failure(two_users):
    bob, alice = two_users
    gate = writegate.gate_of([bob])
    path = bob / "set" / "new.png"
    with gate.create(path) as f:
        f.write(b"one")
    with pytest.raises(WriteRefused, match="already exists"):
        with gate.create(path) as f:
            f.write(b"two")
    assert path.read_bytes() == b"one"
    with pytest.raises(RuntimeError):
        with gate.create(bob / "set" / "half.png") as f:
            f.write(b"part")
            raise RuntimeError("the upload broke")
    assert not (bob / "set" / "half.png").exists()
    (bob / "set" / "planted.png").symlink_to(alice / "al" / "al0.txt")
    with pytest.raises(WriteRefused, match="already exists"):
        gate.copy_file(path, bob / "set" / "planted.png")
    assert (alice / "al" / "al0.txt").read_text() == "alice's caption\n"
