"""Archived bundles: unpacked whole into a folder with index.md, or refused leaving nothing behind."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from portfolio_optimiser.daemon.archive import ArchiveError, extract_bundle, is_archive

INDEX = b"---\ntype: project\nid: p-1\n---\n# Project\n"


def make_zip(path: Path, members: Sequence[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return path


def make_tar(path: Path, members: Sequence[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                archive.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return path


def tar_entry(name: str, kind: bytes, *, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def zip_symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def assert_refused_leaving_nothing(archive: Path, out: Path, *, match: str, **limits: int) -> None:
    with pytest.raises(ArchiveError, match=match) as caught:
        extract_bundle(archive, out / "bundle", **limits)
    assert caught.value.archive == archive
    assert list(out.iterdir()) == []


# -- good archives -------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_a_zip_with_one_top_level_folder_extracts_to_a_bundle_folder(
    tmp_path: Path, out: Path
) -> None:
    archive = make_zip(
        tmp_path / "in" / "p.zip",
        [("project-a/index.md", INDEX), ("project-a/costs/02.3.md", b"cost")],
    )
    bundle = extract_bundle(archive, out / "bundle")
    assert bundle == out / "bundle"
    assert (bundle / "index.md").read_bytes() == INDEX
    assert (bundle / "costs" / "02.3.md").read_bytes() == b"cost"
    assert sorted(p.name for p in out.iterdir()) == ["bundle"]


@pytest.mark.loadbearing
def test_a_tar_gz_with_index_md_at_its_root_extracts_to_a_bundle_folder(
    tmp_path: Path, out: Path
) -> None:
    # ``tar czf p.tgz -C project-a .`` writes "./" and "./index.md".
    archive = make_tar(
        tmp_path / "in" / "p.tgz",
        [tar_entry("./", tarfile.DIRTYPE), ("./index.md", INDEX), ("./notes/a.md", b"a")],
    )
    bundle = extract_bundle(archive, out / "bundle")
    assert (bundle / "index.md").read_bytes() == INDEX
    assert (bundle / "notes" / "a.md").read_bytes() == b"a"
    assert sorted(p.name for p in out.iterdir()) == ["bundle"]


def test_a_tar_gz_with_one_top_level_folder_extracts(tmp_path: Path, out: Path) -> None:
    archive = make_tar(
        tmp_path / "in" / "p.tar.gz",
        [tar_entry("project-a", tarfile.DIRTYPE), ("project-a/index.md", INDEX)],
    )
    assert (extract_bundle(archive, out / "bundle") / "index.md").read_bytes() == INDEX


def test_finder_resource_forks_are_left_out(tmp_path: Path, out: Path) -> None:
    archive = make_zip(
        tmp_path / "in" / "p.zip",
        [
            ("project-a/index.md", INDEX),
            ("__MACOSX/", b""),
            ("__MACOSX/project-a/._index.md", b"\x00\x05\x16\x07"),
        ],
    )
    bundle = extract_bundle(archive, out / "bundle")
    assert sorted(p.name for p in bundle.iterdir()) == ["index.md"]


def test_is_archive_knows_the_three_suffixes(tmp_path: Path) -> None:
    assert all(is_archive(tmp_path / n) for n in ("a.zip", "a.tar.gz", "a.TGZ"))
    assert not any(is_archive(tmp_path / n) for n in ("a.tar", "a.gz", "a.json"))


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("member", "match"),
    [
        ("../evil.md", r"'\.\./evil\.md' climbs out of the bundle"),
        ("project-a/../../evil.md", "climbs out of the bundle"),
        ("..\\evil.md", "climbs out of the bundle"),
        ("/etc/evil.md", "absolute path"),
        ("C:/evil.md", "drive letter"),
        ("c:evil.md", "drive letter"),
    ],
)
def test_zip_slip_is_refused_naming_the_member(
    tmp_path: Path, out: Path, member: str, match: str
) -> None:
    archive = make_zip(tmp_path / "in" / "p.zip", [("index.md", INDEX), (member, b"owned")])
    assert_refused_leaving_nothing(archive, out, match=match)
    assert not (tmp_path / "evil.md").exists()


@pytest.mark.loadbearing
def test_zip_slip_in_a_tar_is_refused(tmp_path: Path, out: Path) -> None:
    archive = make_tar(tmp_path / "in" / "p.tgz", [("index.md", INDEX), ("../evil.md", b"x")])
    assert_refused_leaving_nothing(archive, out, match="climbs out of the bundle")
    assert not (tmp_path / "evil.md").exists()


@pytest.mark.loadbearing
def test_a_symlink_member_is_refused(tmp_path: Path, out: Path) -> None:
    archive = make_zip(
        tmp_path / "in" / "p.zip", [("index.md", INDEX), (zip_symlink("link.md"), b"/etc/passwd")]
    )
    assert_refused_leaving_nothing(archive, out, match=r"'link\.md' is a symbolic link")


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (tar_entry("link.md", tarfile.SYMTYPE, linkname="/etc/passwd"), "symbolic link"),
        (tar_entry("hard.md", tarfile.LNKTYPE, linkname="index.md"), "hard link"),
        (tar_entry("tty", tarfile.CHRTYPE), "device, pipe or socket"),
        (tar_entry("disk", tarfile.BLKTYPE), "device, pipe or socket"),
        (tar_entry("pipe", tarfile.FIFOTYPE), "device, pipe or socket"),
    ],
)
def test_links_and_special_files_in_a_tar_are_refused(
    tmp_path: Path, out: Path, entry: tarfile.TarInfo, match: str
) -> None:
    archive = make_tar(tmp_path / "in" / "p.tgz", [("index.md", INDEX), entry])
    assert_refused_leaving_nothing(archive, out, match=match)


@pytest.mark.loadbearing
def test_a_zip_bomb_is_refused_by_uncompressed_size(tmp_path: Path, out: Path) -> None:
    archive = make_zip(
        tmp_path / "in" / "p.zip", [("index.md", INDEX), ("zeros.md", b"\0" * 100_000)]
    )
    assert archive.stat().st_size < 2_000  # it really is small on disk
    assert_refused_leaving_nothing(
        archive, out, match=r"'zeros\.md' takes the bundle past 10000 bytes", max_total_bytes=10_000
    )


@pytest.mark.loadbearing
def test_a_tar_bomb_is_refused_while_it_is_written(tmp_path: Path, out: Path) -> None:
    archive = make_tar(tmp_path / "in" / "p.tgz", [("index.md", INDEX), ("z.md", b"\0" * 100_000)])
    assert_refused_leaving_nothing(
        archive, out, match="takes the bundle past 10000 bytes", max_total_bytes=10_000
    )


@pytest.mark.loadbearing
@pytest.mark.parametrize("suffix", [".zip", ".tgz"])
def test_too_many_members_are_refused(tmp_path: Path, out: Path, suffix: str) -> None:
    members = [("index.md", INDEX), *((f"n{i}.md", b"x") for i in range(10))]
    path = tmp_path / "in" / f"p{suffix}"
    archive = make_zip(path, members) if suffix == ".zip" else make_tar(path, list(members))
    assert_refused_leaving_nothing(
        archive, out, match=r"'n9\.md' is one more than the 10 members", max_members=10
    )


def test_an_encrypted_member_is_refused(tmp_path: Path, out: Path) -> None:
    archive = make_zip(tmp_path / "in" / "p.zip", [("index.md", INDEX)])
    # zipfile cannot write encrypted members: set the "encrypted" flag bit in both headers.
    data = bytearray(archive.read_bytes())
    data[data.index(b"PK\x03\x04") + 6] |= 0x1
    data[data.index(b"PK\x01\x02") + 8] |= 0x1
    archive.write_bytes(bytes(data))
    assert_refused_leaving_nothing(archive, out, match=r"'index\.md' is encrypted")


def test_a_member_given_twice_is_refused(tmp_path: Path, out: Path) -> None:
    archive = make_tar(tmp_path / "in" / "p.tgz", [("index.md", INDEX), ("index.md", b"other")])
    assert_refused_leaving_nothing(archive, out, match="appears twice")


def test_a_file_and_a_folder_of_one_name_are_refused(tmp_path: Path, out: Path) -> None:
    archive = make_zip(
        tmp_path / "in" / "p.zip", [("index.md", INDEX), ("a", b"file"), ("a/b.md", b"x")]
    )
    assert_refused_leaving_nothing(archive, out, match="clashes with a file")


@pytest.mark.parametrize(
    "members",
    [
        [("notes/readme.md", b"x")],  # no index.md anywhere at the top
        [("a/index.md", INDEX), ("b/index.md", INDEX)],  # two top-level folders
        [("deep/er/index.md", INDEX)],  # index.md too deep
    ],
)
def test_an_archive_without_index_md_at_the_top_is_refused(
    tmp_path: Path, out: Path, members: list[tuple[str, bytes]]
) -> None:
    archive = make_zip(tmp_path / "in" / "p.zip", list(members))
    assert_refused_leaving_nothing(archive, out, match="has no index.md at its root")


def test_a_damaged_archive_is_refused_with_a_sentence(tmp_path: Path, out: Path) -> None:
    for name in ("p.zip", "p.tar.gz"):
        archive = tmp_path / "in" / name
        archive.parent.mkdir(exist_ok=True)
        archive.write_bytes(b"PK\x03\x04 this is not really an archive" * 10)
        assert_refused_leaving_nothing(archive, out, match="not a readable archive")


def test_a_truncated_tar_gz_is_refused(tmp_path: Path, out: Path) -> None:
    whole = make_tar(tmp_path / "in" / "w.tgz", [("index.md", INDEX), ("big.md", b"y" * 50_000)])
    cut = tmp_path / "in" / "cut.tgz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert_refused_leaving_nothing(cut, out, match="not a readable archive")


def test_an_unknown_archive_type_is_refused(tmp_path: Path, out: Path) -> None:
    path = tmp_path / "in" / "p.rar"
    path.parent.mkdir()
    path.write_bytes(b"Rar!")
    assert_refused_leaving_nothing(path, out, match=r"not a \.zip, \.tar\.gz or \.tgz")


def test_an_existing_destination_is_never_replaced(tmp_path: Path, out: Path) -> None:
    archive = make_zip(tmp_path / "in" / "p.zip", [("index.md", INDEX)])
    (out / "bundle").mkdir()
    with pytest.raises(FileExistsError):
        extract_bundle(archive, out / "bundle")
    assert list(out.iterdir()) == [out / "bundle"]
    assert list((out / "bundle").iterdir()) == []
