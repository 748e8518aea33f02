"""kraft-metadata-shell: Kafka's shell tests re-stated (CommandTest, CommandUtilsTest, LsCommandHandlerTest,
GlobComponentTest, GlobVisitorTest, MetadataShellIntegrationTest's lock), what it shows for every Kafka
fixture, the one-command mode (stdout, stderr, exit codes), time travel and ``diff`` from the command
line, and the interactive mode driven through a pseudo-terminal as a person uses it."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from conftest import fixture_params
from support.metadata_history import Batch, bootstrap, leader_change, v, write_log

from kraft_node.metadata.controller.security_control import ClientQuotaEntity
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.time_travel import image_at
from kraft_node.metadata.shell import main as shell_main
from kraft_node.metadata.shell.commands import (
    COMMAND_TYPES,
    CatCommand,
    CdCommand,
    ColumnSchema,
    CommandIO,
    Commands,
    ErroneousCommand,
    ExitCommand,
    FindCommand,
    HelpCommand,
    HistoryCommand,
    LsCommand,
    ManCommand,
    MetadataShellState,
    NoOpCommand,
    PwdCommand,
    ShellExit,
    TargetDirectory,
    TreeCommand,
    calculate_column_schema,
    complete_line,
    complete_path,
    print_entries,
    print_targets,
)
from kraft_node.metadata.shell.glob import GlobComponent, split_path, strip_dot_path_components, visit_glob
from kraft_node.metadata.shell.image_nodes import (
    RootShellNode,
    client_quota_entity_name,
    decode_client_quota_entity,
)
from kraft_node.metadata.shell.node import (
    MetadataLeafNode,
    MetadataNode,
    NodeStringifier,
    RedactionCriteria,
    ShellNodePrinter,
)
from kraft_node.metadata.shell.text import java_double, record_text, utc_zoned_time, version_range_text
from kraft_storage.dirlock import DirLock
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

FIXTURE_DIRS = fixture_params("__cluster_metadata-0")
SHELL = [sys.executable, "-m", "kraft_node.metadata.shell.main"]


# ---------------------------------------------------------------------------------------------
# Kafka's CommandTest
# ---------------------------------------------------------------------------------------------

def test_parse_commands():
    c = Commands(True)
    assert c.parse_command(["cat", "foo"]) == CatCommand(("foo",))
    assert c.parse_command(["cd"]) == CdCommand(None)
    assert c.parse_command(["cd", "foo"]) == CdCommand("foo")
    assert c.parse_command(["exit"]) == ExitCommand()
    assert c.parse_command(["help"]) == HelpCommand()
    assert c.parse_command(["history", "3"]) == HistoryCommand(3)
    assert c.parse_command(["history"]) == HistoryCommand(2**31 - 1)
    assert c.parse_command(["ls"]) == LsCommand(())
    assert c.parse_command(["ls", "abc", "123"]) == LsCommand(("abc", "123"))
    assert c.parse_command(["pwd"]) == PwdCommand()
    assert c.parse_command(["find"]) == FindCommand(())
    assert c.parse_command(["tree", "a", "b"]) == TreeCommand(("a", "b"))
    assert c.parse_command(["man", "ls"]) == ManCommand("ls")


def test_parse_invalid_command():
    assert Commands(True).parse_command(["blah"]) == ErroneousCommand(
        "invalid choice: 'blah' (choose from 'cat', 'cd', 'diff', 'exit', 'find', 'help', 'history', 'ls', 'man', "
        "'pwd', 'tree')")
    # without a shell, the shell-only commands are not choices (Kafka's Commands(false))
    assert Commands(False).parse_command(["cd", "/"]) == ErroneousCommand(
        "invalid choice: 'cd' (choose from 'cat', 'diff', 'find', 'ls', 'tree')")
    # a prefix is not a command (argparse4j resolves it; Kafka's shell then refuses it)
    assert Commands(True).parse_command(["hist"]) == ErroneousCommand(
        "invalid choice: 'hist': did you mean 'history'?")
    assert Commands(True).parse_command(["c"]) == ErroneousCommand("ambiguous command: c could match cat, cd")
    bad = Commands(True).parse_command(["history", "x"])
    assert isinstance(bad, ErroneousCommand) and "could not convert 'x' to Integer" in bad.message
    assert isinstance(Commands(True).parse_command(["cat"]), ErroneousCommand)


def test_empty_command_line():
    assert Commands(True).parse_command([""]) == NoOpCommand()
    assert Commands(True).parse_command([]) == NoOpCommand()


# ---------------------------------------------------------------------------------------------
# CommandUtilsTest, GlobComponentTest, GlobVisitorTest
# ---------------------------------------------------------------------------------------------

def test_split_path():
    assert split_path("/alpha/beta") == ["alpha", "beta"]
    assert split_path("//alpha/beta/") == ["alpha", "beta"]


def test_strip_dot_path_components():
    assert strip_dot_path_components(["..", "keep", "keep2"]) == ["keep", "keep2"]
    assert strip_dot_path_components([".", "keep", "keep2"]) == ["keep", "keep2"]
    assert strip_dot_path_components([".", ".keep", "keep2"]) == [".keep", "keep2"]
    assert strip_dot_path_components(["..", ".keep", "keep2"]) == [".keep", "keep2"]


def literal(component: str) -> None:
    g = GlobComponent(component)
    assert g.literal and g.component == component
    assert g.matches(component) and not g.matches(component + "foo")


def test_glob_literal_component():
    for c in ("abc", "", "foobar_123", "$blah+"):
        literal(c)


def test_glob_to_regular_expression():
    assert GlobComponent.to_regular_expression("blah") is None
    assert GlobComponent.to_regular_expression("") is None
    assert GlobComponent.to_regular_expression("does not need a regex, actually") is None
    assert GlobComponent.to_regular_expression("$blah*") == "^\\$blah.*$"
    assert GlobComponent.to_regular_expression("*") == "^.*$"
    assert GlobComponent.to_regular_expression("foo{bar,baz}") == "^foo(?:(?:bar)|(?:baz))$"
    # malformed groups are taken literally
    assert GlobComponent("a{b{c}}").literal and GlobComponent("a{b").literal


def test_glob_match():
    star = GlobComponent("*")
    assert not star.literal and star.matches("") and star.matches("anything")
    q = GlobComponent("b?b")
    assert not q.literal and not q.matches("") and q.matches("bob") and q.matches("bib") and not q.matches("bic")
    g = GlobComponent("foo{bar,baz}")
    assert [g.matches(s) for s in ("foobar", "foobaz", "foobah", "foo", "baz")] == [True, True, False, False, False]
    # an escape alone does not make a glob (Kafka: the component is then taken as it is written)
    assert GlobComponent("a\\*").literal and GlobComponent("a\\*").matches("a\\*")
    escaped = GlobComponent("a\\*b*")
    assert not escaped.literal and escaped.matches("a*bc") and not escaped.matches("axbc")


class TreeNode(MetadataNode):
    def __init__(self, name: str, *children: TreeNode, directory: bool = True) -> None:
        self.name = name
        self.children = {c.name: c for c in children}
        self.directory = directory

    def is_directory(self) -> bool:
        return self.directory

    def child_names(self):
        return self.children.keys()

    def child(self, name):
        return self.children.get(name)


ROOT = TreeNode("", TreeNode("alpha", TreeNode("beta", TreeNode("gamma")), TreeNode("theta")),
                TreeNode("foo", TreeNode("a"), TreeNode("beta")),
                TreeNode("zeta", TreeNode("c", directory=False)), TreeNode("zzz"))


def paths(glob: str, wd: str = "foo") -> list[str]:
    return [i.absolute_path() for i in visit_glob(glob, ROOT, wd)]


def test_glob_visitor():
    assert paths("*") == ["/foo/a", "/foo/beta"]
    assert paths("..") == ["/"] and paths("../..") == ["/"]
    assert paths("../z*") == ["/zeta", "/zzz"]
    assert paths("../*/{beta,theta}") == ["/alpha/beta", "/alpha/theta", "/foo/beta"]
    assert paths("epsilon") == []
    assert paths("/a?pha") == ["/alpha"]
    assert paths("/zeta/c/x") == []  # nothing under a file
    assert visit_glob("/", ROOT, "/")[0].last_path_component() == "/"


# ---------------------------------------------------------------------------------------------
# LsCommandHandlerTest
# ---------------------------------------------------------------------------------------------

def test_calculate_column_schema():
    assert calculate_column_schema(None, ["abc", "def", "ghi"]) == ColumnSchema((0,), 3)
    assert calculate_column_schema(0, ["abc", "def"]) == ColumnSchema((0,), 2)
    assert calculate_column_schema(80, ["a", "abcdef", "beta"]) == ColumnSchema((3, 8, 6), 1)
    assert calculate_column_schema(18, ["alphabet", "beta", "gamma", "theta", "zeta"]) == ColumnSchema((10, 7), 3)


def test_print_entries():
    out = io.StringIO()
    print_entries(out, "", 18, ["alphabet", "beta", "gamma", "theta", "zeta"])
    assert out.getvalue().strip() == "alphabet  theta\nbeta      zeta\ngamma"


def test_print_targets():
    out = io.StringIO()
    print_targets(out, 18, ["foo", "foobarbaz", "quux"], [
        TargetDirectory("/some/dir", ("supercalifragalistic",)),
        TargetDirectory("/some/other/dir", ("capability", "delegation", "elephant", "fungible", "green"))])
    assert out.getvalue().strip() == "\n".join([
        "foo        quux", "foobarbaz  ", "", "/some/dir:", "supercalifragalistic", "", "/some/other/dir:",
        "capability", "delegation", "elephant", "fungible", "green"])


# ---------------------------------------------------------------------------------------------
# Printers and Kafka's text
# ---------------------------------------------------------------------------------------------

def test_stringifier_and_shell_printer():
    tree = TreeNode("", TreeNode("a", TreeNode("x")), TreeNode("b"))
    tree.children["a"].children["x"] = LeafNamed("x", "1")
    tree.children["c"] = LeafNamed("c", "2")
    assert tree.stringify() == "a(x(1)), b(), c(2)"
    out = io.StringIO()
    tree.print(ShellNodePrinter(out))
    assert out.getvalue() == "a:\n  x:\n    1\nb:\nc:\n  2\n"
    s = NodeStringifier()
    s.output("a")
    s.output("b")
    assert str(s) == "a, b"


class LeafNamed(MetadataLeafNode):
    def __init__(self, name: str, text: str) -> None:
        super().__init__(text)
        self.name = name


def test_kafka_number_and_time_text():
    assert [java_double(x) for x in (1024.0, 0.001, 1e7, 1.5e-5, 123.456, 9999999.0, -3.0, 0.0)] == [
        "1024.0", "0.001", "1.0E7", "1.5E-5", "123.456", "9999999.0", "-3.0", "0.0"]
    assert utc_zoned_time(0) == "1970-01-01T00:00:00Z[UTC]"
    assert utc_zoned_time(1704164645678) == "2024-01-02T03:04:05.678Z[UTC]"
    assert utc_zoned_time(1704164645500) == "2024-01-02T03:04:05.5Z[UTC]"
    assert utc_zoned_time(-1) == "1969-12-31T23:59:59.999Z[UTC]"
    assert [version_range_text(*r) for r in ((3, 3), (1, 32767), (1, 19))] == ["3", "1+", "1-19"]


def test_record_text_is_kafka_to_string():
    tid = Uuid.from_string("gmybImTPGuH_FBlUPAP-Bw")
    assert record_text(m.TopicRecord(name="foo", topic_id=tid)) == (
        "TopicRecord(name='foo', topicId=gmybImTPGuH_FBlUPAP-Bw)")
    text = record_text(m.UserScramCredentialRecord(name="u", mechanism=1, salt=b"\x01\xff", stored_key=b"",
                                                   server_key=b"", iterations=4096))
    assert text == ("UserScramCredentialRecord(name='u', mechanism=1, salt=[1, -1], storedKey=[], serverKey=[], "
                    "iterations=4096)")
    broker = record_text(m.RegisterBrokerRecord(broker_id=1, rack=None, end_points=[
        m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="h", port=9092, security_protocol=0)]))
    assert "endPoints=[BrokerEndpoint(name='PLAINTEXT', host='h', port=9092, securityProtocol=0)]" in broker
    assert "rack=null" in broker and "fenced=true" in broker


def test_client_quota_entity_names_round_trip():
    cases = [({"client-id": "a(b)"}, "clientId(a\\(b\\))"), ({"user": "u", "ip": "1.2.3.4"}, "ip(1.2.3.4)_user(u)"),
             ({"user": None, "client-id": "x"}, "clientId(x)_user"), ({"user": "a\\b"}, "user(a\\\\b)")]
    for entries, name in cases:
        e = ClientQuotaEntity(entries)
        assert client_quota_entity_name(e) == name
        assert decode_client_quota_entity(name) == e
    for bad in ("", "foo(x)", "user(x", "user(x)_", "user(x)ip(y)"):
        assert decode_client_quota_entity(bad) is None
    with pytest.raises(ValueError, match="Invalid empty entity"):
        client_quota_entity_name(ClientQuotaEntity({}))


# ---------------------------------------------------------------------------------------------
# A rich image: every node kind
# ---------------------------------------------------------------------------------------------

T1 = Uuid.from_string("gmybImTPGuH_FBlUPAP-Bw")
ACL = Uuid.from_string("Ia4kLWzHTqyf8t2Tb1k9ZQ")


def rich_records() -> list[object]:
    return [r.message for r in bootstrap()] + [
        m.FeatureLevelRecord(name="group.version", feature_level=1),
        m.RegisterBrokerRecord(broker_id=2, broker_epoch=5, incarnation_id=Uuid(3), rack="r1", fenced=False,
                               end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="SSL", host="b", port=1,
                                                                                  security_protocol=1),
                                           m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="a",
                                                                                  port=2, security_protocol=0)],
                               features=[m.RegisterBrokerRecord.BrokerFeature(
                                   name="metadata.version", min_supported_version=7, max_supported_version=19)],
                               log_dirs=[Uuid(500)]),
        m.TopicRecord(name="foo", topic_id=T1),
        m.PartitionRecord(partition_id=0, topic_id=T1, replicas=[2], isr=[2], leader=2, leader_epoch=0,
                          partition_epoch=0, directories=[Uuid(500)]),
        m.PartitionRecord(partition_id=10, topic_id=T1, replicas=[2], isr=[2], leader=2, leader_epoch=0,
                          partition_epoch=0, directories=[Uuid(500)]),
        m.ConfigRecord(resource_type=2, resource_name="foo", name="retention.ms", value="100"),
        m.ConfigRecord(resource_type=4, resource_name="", name="min.insync.replicas", value="2"),
        m.ConfigRecord(resource_type=8, resource_name="2", name="kafka.log", value="DEBUG"),
        m.ClientQuotaRecord(entity=[m.ClientQuotaRecord.EntityData(entity_type="user", entity_name="alice")],
                            key="producer_byte_rate", value=1e7, remove=False),
        m.ProducerIdsRecord(broker_id=2, broker_epoch=5, next_producer_id=4000),
        m.AccessControlEntryRecord(id=ACL, resource_type=2, resource_name="foo", pattern_type=3,
                                   principal="User:alice", host="*", operation=3, permission_type=3),
        m.UserScramCredentialRecord(name="alice", mechanism=1, salt=b"\x01\x02", stored_key=b"\xab",
                                    server_key=b"\xcd", iterations=4096),
        m.DelegationTokenRecord(owner="User:alice", requester="User:bob", renewers=["User:c", "User:d"],
                                issue_timestamp=1, max_timestamp=2, expiration_timestamp=3, token_id="tok1"),
    ]


@pytest.fixture
def rich_state() -> MetadataShellState:
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay_all(rich_records())
    image = delta.apply(MetadataProvenance(41, 3, 1704164645678, True))
    return MetadataShellState(RootShellNode(image))


def run(state: MetadataShellState, line: list[str], shell: object = None) -> tuple[str, str, bool]:
    out, err = io.StringIO(), io.StringIO()
    cio = CommandIO(out, err)
    Commands(True).parse_command(line).run(shell, cio, state)  # type: ignore[arg-type]
    return out.getvalue(), err.getvalue(), cio.failed


def test_paths_and_texts_of_every_node_kind(rich_state):
    out, err, failed = run(rich_state, ["ls", "/image"])
    assert out.split() == ["acls", "clientQuotas", "cluster", "configs", "delegationToken", "features",
                           "producerIds", "provenance", "scram", "topics"] and not failed
    cat = {p: run(rich_state, ["cat", p])[0].rstrip("\n") for p in (
        "/image/provenance", "/image/features/metadataVersion", "/image/features/finalized_group.version",
        "/image/features/finalized_nope", "/image/cluster/brokers/2", "/image/topics/byName/foo/10",
        "/image/topics/byName/foo/id", f"/image/topics/byId/{T1}/name", "/image/configs/TOPIC:foo/retention.ms",
        "/image/configs/BROKER/min.insync.replicas", "/image/configs/BROKER_LOGGER:2/kafka.log",
        "/image/clientQuotas/user(alice)/producer_byte_rate", "/image/producerIds/nextProducerId",
        f"/image/acls/{ACL}", "/image/scram/SCRAM-SHA-256/alice", "/image/delegationToken/tok1",
        "/local/commitId")}
    assert cat == {
        "/image/provenance": "offset 41, epoch 3, time 2024-01-02T03:04:05.678Z[UTC]",
        "/image/features/metadataVersion": "3.7-IV4",
        "/image/features/finalized_group.version": "1",
        "/image/features/finalized_nope": "0",
        "/image/cluster/brokers/2": (
            "BrokerRegistration(id=2, epoch=5, incarnationId=AAAAAAAAAAAAAAAAAAAAAw, listeners=["
            "Endpoint(listenerName='PLAINTEXT', securityProtocol=PLAINTEXT, host='a', port=2), "
            "Endpoint(listenerName='SSL', securityProtocol=SSL, host='b', port=1)], "
            "supportedFeatures={metadata.version: 7-19}, rack=r1, fenced=false, inControlledShutdown=false, "
            "isMigratingZkBroker=false, directories=[AAAAAAAAAAAAAAAAAAAB9A])"),
        "/image/topics/byName/foo/10": (
            "PartitionRegistration(replicas=[2], directories=[AAAAAAAAAAAAAAAAAAAB9A], isr=[2], removingReplicas=[], "
            "addingReplicas=[], elr=[], lastKnownElr=[], leader=2, leaderRecoveryState=RECOVERED, leaderEpoch=0, "
            "partitionEpoch=0)"),
        "/image/topics/byName/foo/id": str(T1),
        f"/image/topics/byId/{T1}/name": "foo",
        "/image/configs/TOPIC:foo/retention.ms": "100",
        "/image/configs/BROKER/min.insync.replicas": "2",
        "/image/configs/BROKER_LOGGER:2/kafka.log": "DEBUG",
        "/image/clientQuotas/user(alice)/producer_byte_rate": "1.0E7",
        "/image/producerIds/nextProducerId": "4000",
        f"/image/acls/{ACL}": ("StandardAcl(resourceType=TOPIC, resourceName=foo, patternType=LITERAL, "
                               "principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"),
        "/image/scram/SCRAM-SHA-256/alice": (
            "ScramCredentialData(salt=0102, storedKey=ab, serverKey=cd, iterations=4096)"),
        "/image/delegationToken/tok1": (
            "DelegationTokenDatatokenId=tok1(owner=User:alice(tokenRequester=User:bob"
            "(renewers=User:c User:d, issueTimestamp=1, maxTimestamp=2), expiryTimestamp=3"),
        "/local/commitId": os.environ.get("KRAFT_COMMIT_ID", "unknown"),
    }
    assert run(rich_state, ["ls", "/image/topics/byName/foo"])[0].split() == ["0", "10", "id", "name"]
    assert run(rich_state, ["ls", "/image/scram/SCRAM-SHA-512"]) == ("", "", False)
    assert run(rich_state, ["ls", "/image/configs"])[0].split() == ["BROKER", "BROKER_LOGGER:2", "TOPIC:foo"]
    # secrets are redacted by a strict printer, shown by the shell's
    node = rich_state.root.child("image").child("scram").child("SCRAM-SHA-256").child("alice")
    assert node.stringify() == ("ScramCredentialData(salt=[redacted], storedKey=[redacted], serverKey=[redacted], "
                                "iterations=[redacted])")
    cfg = rich_state.root.child("image").child("configs").child("TOPIC:foo")
    assert cfg.stringify() == "retention.ms([redacted])"
    assert cfg.stringify(RedactionCriteria.DISABLED) == "retention.ms(100)"


def test_find_tree_cd_pwd_and_errors(rich_state):
    out, _, _ = run(rich_state, ["find", "/image/topics/byName"])
    assert out.splitlines() == ["/image/topics/byName", "/image/topics/byName/foo", "/image/topics/byName/foo/0",
                                "/image/topics/byName/foo/10", "/image/topics/byName/foo/id",
                                "/image/topics/byName/foo/name"]
    assert run(rich_state, ["tree", "/image/producerIds"])[0] == "nextProducerId:\n  4000\n"
    assert run(rich_state, ["cd", "image/topics/byName"]) == ("", "", False)
    assert run(rich_state, ["pwd"])[0] == "/image/topics/byName\n"
    assert run(rich_state, ["ls"])[0] == "foo\n"
    assert run(rich_state, ["cat", "foo/name", "../byId/*/name"])[0] == "foo\nfoo\n"
    assert run(rich_state, ["cd", ".."]) == ("", "", False) and rich_state.working_directory == "/image/topics"
    assert run(rich_state, ["cd"]) == ("", "", False) and rich_state.working_directory == "/"
    assert run(rich_state, ["cd", "nope"]) == ("", "cd: nope: no such directory.\n", True)
    assert run(rich_state, ["cd", "image/provenance"]) == ("", "cd: image/provenance: not a directory.\n", True)
    assert run(rich_state, ["cat", "image"]) == ("", "cat: image: Is a directory\n", True)
    assert run(rich_state, ["cat", "nope"]) == ("", "cat: nope: No such file or directory.\n", True)
    assert run(rich_state, ["ls", "nope"]) == ("", "ls: nope: no such file or directory.\n", True)
    assert run(rich_state, ["tree", "nope"]) == ("", "tree: nope: No such file or directory.\n", True)
    assert run(rich_state, ["find", "nope"]) == ("", "find: nope: no such file or directory.\n", True)
    assert run(rich_state, ["man", "nope"])[1] == "man: unknown command nope. Type help to get a list of commands.\n"
    assert run(rich_state, ["history"])[1] == "The history command requires a shell.\n"
    man = run(rich_state, ["man", "ls"])[0]
    assert man.startswith("ls: List metadata nodes.\n\nusage: ls [targets ...]")
    helptext = run(rich_state, ["help"])[0]
    assert helptext.startswith("Welcome to the Apache Kafka metadata shell.\n\n")
    assert all(f"    {name}" in helptext for name in COMMAND_TYPES)
    with pytest.raises(ShellExit):
        run(rich_state, ["exit"])
    # ls of several targets heads each directory, files first
    out = run(rich_state, ["ls", "/image/producerIds", "/image/producerIds/nextProducerId", "/image/cluster"])[0]
    assert out == "nextProducerId\n\nproducerIds:\nnextProducerId\n\ncluster:\nbrokers\ncontrollers\n"


def test_completion(rich_state):
    vals = [c.value for c in complete_line(rich_state, [""])]
    assert vals == sorted(COMMAND_TYPES)
    assert [(c.value, c.complete) for c in complete_line(rich_state, ["c"])] == [("cat", True), ("cd", True)]
    assert [(c.value, c.complete) for c in complete_path(rich_state, "im")] == [("image/", False)]
    assert [c.value for c in complete_path(rich_state, "/image/c")] == ["/image/clientQuotas/", "/image/cluster/",
                                                                        "/image/configs/"]
    assert [(c.value, c.complete) for c in complete_path(rich_state, "image/producerIds/")] == [
        ("image/producerIds/nextProducerId", True)]
    assert complete_path(rich_state, "image/provenance/x") == []
    assert [c.value for c in complete_line(rich_state, ["man", "hi"])] == ["history"]
    assert complete_line(rich_state, ["cd", "image/", "x"]) == []  # cd takes one argument
    assert complete_line(rich_state, ["pwd", ""]) == []
    assert complete_line(rich_state, ["nope", ""]) == []
    rich_state.working_directory = "/image/topics"
    assert [c.value for c in complete_line(rich_state, ["cat", "../t"])] == ["../topics/"]


# ---------------------------------------------------------------------------------------------
# Kafka's fixtures: what Kafka's shell would show
# ---------------------------------------------------------------------------------------------

#: fixture -> (metadata.version, finalized features, brokers, controllers, topics, partitions, config resources)
EXPECTED = {
    "kafka-3.6.0-combined-single-node": ("3.6-IV2", {}, ["1"], [], 0, 0, 0),
    "kafka-3.6.0-cp7.6.0-snapshot": ("3.6-IV2", {}, ["1"], [], 60, 148, 55),
    "kafka-3.7.0-combined-single-node": ("3.7-IV4", {}, ["1"], ["1"], 5, 54, 1),
    "kafka-4.0.0-combined-single-node": ("4.0-IV3", {"group.version": "1", "transaction.version": "2"}, ["1"], ["1"],
                                         0, 0, 0),
    "kafka-4.2-mv29-combined-single-node": ("4.2-IV1", {
        "eligible.leader.replicas.version": "1", "group.version": "1", "share.version": "1", "streams.version": "1",
        "transaction.version": "2"}, ["1"], ["1"], 1, 1, 1),
}


def shell(*args: str) -> tuple[int, str, str]:
    """The CLI in this process (``main``), its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        rc = shell_main.main(list(args))
    finally:
        sys.stdout, sys.stderr = old
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("directory", FIXTURE_DIRS, ids=lambda p: Path(p).parent.name)
def test_fixture_shows_what_kafkas_shell_shows(directory):
    name = Path(directory).parent.name
    assert name in EXPECTED, f"a new fixture {name}: add what Kafka's shell shows for it"
    mv, features, brokers, controllers, topics, partitions, configs = EXPECTED[name]
    d = str(Path(directory).parent)
    rc, out, err = shell("-d", d, "cat", "/image/features/metadataVersion")
    assert (rc, out, err) == (0, mv + "\n", "")
    rc, out, _ = shell("-d", d, "ls", "/image/features")
    assert out.split() == sorted(["metadataVersion"] + [f"finalized_{f}" for f in features])
    for f, level in features.items():
        assert shell("-d", d, "cat", f"/image/features/finalized_{f}")[1] == level + "\n"
    assert shell("-d", d, "ls", "/image/cluster/brokers")[1].split() == brokers
    assert shell("-d", d, "ls", "/image/cluster/controllers")[1].split() == controllers
    broker = shell("-d", d, "cat", "/image/cluster/brokers/1")[1]
    assert broker.startswith("BrokerRegistration(id=1, epoch=") and "listeners=[Endpoint(listenerName=" in broker
    names = shell("-d", d, "ls", "/image/topics/byName")[1].split()
    ids = shell("-d", d, "ls", "/image/topics/byId")[1].split()
    assert len(names) == len(ids) == topics
    found = shell("-d", d, "find", "/image/topics/byName")[1].splitlines()
    assert sum(1 for p in found if re.fullmatch(r".*/byName/[^/]+/\d+", p)) == partitions
    assert len(shell("-d", d, "ls", "/image/configs")[1].split()) == configs
    # the directory itself, its parent and the partition directory all work; so does --snapshot on
    # the bootstrap file (features only)
    assert shell("-d", str(directory), "cat", "/image/features/metadataVersion")[1] == mv + "\n"
    rc, out, _ = shell("-s", str(Path(d) / "bootstrap.checkpoint"), "cat", "/image/features/metadataVersion",
                       "/image/provenance")
    assert rc == 0 and out == f"{mv}\noffset -1, epoch 0, time 1970-01-01T00:00:00Z[UTC]\n"


def test_fixture_37_details(fixtures_dir):
    d = str(fixtures_dir / "kafka-3.7.0-combined-single-node")
    assert shell("-d", d, "ls", "/image/topics/byName")[1].splitlines() == [
        "Retry.TestTopicPatient", "TestTopicPatient", "__consumer_offsets",
        "batch2.work.notification.SHR_PROD.persistence", "subscription.matching.SHR_PROD.persistence"]
    assert shell("-d", d, "cat", "/image/provenance")[1] == "offset 4928, epoch 1, time 2026-01-30T17:23:55.851Z[UTC]\n"
    assert shell("-d", d, "ls", "/image/configs/TOPIC:__consumer_offsets")[1].split() == [
        "cleanup.policy", "compression.type", "segment.bytes"]
    assert shell("-d", d, "cat", "/image/producerIds/nextProducerId")[1] == "1000\n"
    tree = shell("-d", d, "tree", "/image/cluster")[1].splitlines()
    assert tree[0] == "brokers:" and tree[1] == "  1:" and tree[2].startswith("    BrokerRegistration(id=1, epoch=8,")
    # a .log segment given as --snapshot, as Kafka's shell takes it
    seg = fixtures_dir / "kafka-3.7.0-combined-single-node" / "__cluster_metadata-0" / f"{0:020d}.log"
    assert shell("-s", str(seg), "ls", "/image/topics/byName")[1].count("\n") == 5


# ---------------------------------------------------------------------------------------------
# One command from the command line: exit codes, stderr, time travel, diff
# ---------------------------------------------------------------------------------------------

def txn_dir(tmp_path: Path) -> Path:
    t = Uuid(9)
    write_log(tmp_path, [
        leader_change(1),                                                                          # 0
        Batch(bootstrap(), False, 1),                                                              # 1
        Batch([v(m.TopicRecord(name="a", topic_id=Uuid(8))),                                       # 2
               v(m.PartitionRecord(partition_id=0, topic_id=Uuid(8), replicas=[1], isr=[1], leader=1), 0)],
              False, 1),                                                                           # 3
        Batch([v(m.BeginTransactionRecord(name="x")), v(m.TopicRecord(name="t", topic_id=t))], False, 2),  # 4, 5
    ])
    return tmp_path


def test_at_offset_and_the_open_transaction_note(tmp_path):
    d = str(txn_dir(tmp_path))
    rc, out, err = shell("-d", d, "ls", "/image/topics/byName")
    assert (rc, out) == (0, "a\n")
    assert err == ("Note: offset 5 is inside a metadata transaction begun at offset 4 that has not ended by then: "
                   "its records are not shown (the image is as of offset 3)\n")
    rc, out, err = shell("-d", d, "--at-offset", "2", "ls", "/image/topics/byName")
    assert (rc, out, err) == (0, "a\n", "")
    rc, out, err = shell("-d", d, "--at-offset", "1", "cat", "/image/provenance", "/image/features/metadataVersion")
    assert (rc, err) == (0, "") and out.startswith("offset 1, epoch 1, time ") and out.endswith("\n3.7-IV4\n")
    assert shell("-d", d, "--at-offset", "1", "ls", "/image/topics/byName")[1] == ""


def test_diff_command(tmp_path):
    d = str(txn_dir(tmp_path))
    rc, out, err = shell("-d", d, "diff", "1", "3")
    lines = [json.loads(x) for x in out.splitlines()]
    assert rc == 0 and [x["type"] for x in lines] == ["TopicRecord", "PartitionRecord"]
    assert lines[0] == {"type": "TopicRecord", "apiKey": 2, "version": 0,
                        "data": {"Name": "a", "TopicId": str(Uuid(8))}}
    rc, out, _ = shell("-d", d, "diff", "3", "1", "--text")
    assert rc == 0 and out == f"RemoveTopicRecord(topicId={Uuid(8)})\n"
    # TO defaults to the image shown: with --at-offset 1, diff 3 is 3 -> 1
    assert shell("-d", d, "--at-offset", "1", "diff", "3", "--text")[1] == out
    rc, out, err = shell("-d", d, "diff", "0", "99")
    assert rc == 1 and out == "" and err.splitlines()[-1].startswith("diff: offset 99 is beyond the end of ")


def test_bad_input_is_one_line_and_non_zero(tmp_path, fixtures_dir):
    rc, out, err = shell("-d", str(tmp_path / "nope"), "ls")
    assert rc == 1 and out == "" and err == f"Error: {tmp_path / 'nope'}: no such file or directory\n"
    rc, _, err = shell("-d", str(tmp_path), "ls")
    assert rc == 1 and err.startswith("Error: ") and "no metadata log here" in err
    d = str(fixtures_dir / "kafka-3.7.0-combined-single-node")
    rc, _, err = shell("-d", d, "--at-offset", "5000", "ls")
    assert rc == 1 and err.startswith("Error: offset 5000 is beyond the end of ") and err.count("\n") == 1
    rc, _, err = shell("-s", str(fixtures_dir / "kafka-3.7.0-combined-single-node" / "bootstrap.checkpoint"),
                       "--at-offset", "3", "ls")
    assert rc == 1 and err.endswith("bootstrap.checkpoint: its last offset is -1\n")
    later = tmp_path / "later"
    write_log(later, [Batch([v(m.NoOpRecord())], False, 1)], base_offset=100)
    rc, _, err = shell("-d", str(later), "--at-offset", "100", "ls")
    assert rc == 1 and err == (f"Error: offset 100 cannot be read: the log of {later / '__cluster_metadata-0'} "
                               "starts at offset 100, not 0, and no snapshot is at or below offset 100 to start from\n")
    rc, _, err = shell("-d", str(later), "--at-offset", "7", "ls")
    assert rc == 1 and err == (f"Error: offset 7 is below the log start offset 100 of {later / '__cluster_metadata-0'} "
                               "and no snapshot is at or below it\n")
    rc, out, err = shell("-d", d, "ls", "/nope", "/image/producerIds")
    assert rc == 1 and out == "nextProducerId\n" and err == "ls: /nope: no such file or directory.\n"
    rc, out, err = shell("-d", d, "pwd")
    assert rc == 1 and err == "invalid choice: 'pwd' (choose from 'cat', 'diff', 'find', 'ls', 'tree')\n"
    rc, _, err = shell("-d", str(fixtures_dir / "kafka-3.7.0-combined-single-node" / "bootstrap.checkpoint"), "ls")
    assert rc == 1 and "not a directory (use --snapshot for a file)" in err


def test_log_dir_of_and_separator(tmp_path, fixtures_dir):
    """Kafka's testParentParent: the lock lives two levels above a snapshot file (the root's is the root)."""
    assert shell_main._log_dir_of(Path("/")) == Path("/")
    f = tmp_path / "__cluster_metadata-0" / "x.checkpoint"
    f.parent.mkdir()
    f.write_bytes(b"")
    assert shell_main._log_dir_of(f) == tmp_path.resolve()
    assert shell_main._log_dir_of(f.parent) == tmp_path.resolve()
    assert shell_main._log_dir_of(tmp_path) == tmp_path.resolve()
    d = str(fixtures_dir / "kafka-4.0.0-combined-single-node")
    assert shell("-d", d, "--", "ls", "/") == (0, "image\nlocal\n", "")
    rc, out, err = shell("-d", d, "ls", "-l")
    assert (rc, out, err) == (1, "", "ls: unrecognized arguments: -l\n")


def test_corrupt_segment_end_to_end(tmp_path, fixtures_dir):
    """A real process: one line on stderr naming the file and position, exit 1, no traceback."""
    src = fixtures_dir / "kafka-3.7.0-combined-single-node" / "__cluster_metadata-0" / f"{0:020d}.log"
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    data = bytearray(src.read_bytes())
    data[-3] ^= 0x55  # inside the last batch's records: its CRC no longer matches
    (part / src.name).write_bytes(bytes(data))
    p = subprocess.run(SHELL + ["-d", str(tmp_path), "ls", "/"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"Error: {part / src.name}: corrupt record batch at byte position ")


def test_locked_directory_is_refused(tmp_path, fixtures_dir):
    """Kafka's MetadataShellIntegrationTest.testLock: a directory a node holds is refused."""
    shutil.copytree(fixtures_dir / "kafka-4.0.0-combined-single-node", tmp_path / "logs")
    lock = DirLock.acquire(str(tmp_path / "logs"))
    try:
        p = subprocess.run(SHELL + ["-d", str(tmp_path / "logs"), "ls", "/"], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 1
        assert p.stderr == (f"Error: Unable to lock {(tmp_path / 'logs').resolve()}. Please ensure that no broker or "
                            "controller process is using this directory before proceeding.\n")
    finally:
        lock.release()
    # once released, the shell reads it (and writes nothing into it)
    before = (tmp_path / "logs" / ".lock").read_bytes()
    p = subprocess.run(SHELL + ["-d", str(tmp_path / "logs"), "ls", "/"], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (0, "image\nlocal\n")
    assert (tmp_path / "logs" / ".lock").read_bytes() == before


# ---------------------------------------------------------------------------------------------
# Interactive, through a pseudo-terminal
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def session(fixtures_dir):
    child = pexpect.spawn(sys.executable, ["-m", "kraft_node.metadata.shell.main", "-d",
                                           str(fixtures_dir / "kafka-3.7.0-combined-single-node")],
                          encoding="utf-8", timeout=60, dimensions=(40, 100), env={**os.environ, "TERM": "xterm"},
                          preexec_fn=_terminal_signals)
    child.expect_exact("Loading...")
    child.expect_exact("Starting...")
    child.expect_exact("[ Kafka Metadata Shell ]")
    child.expect_exact(">> ")
    yield child
    if child.isalive():
        child.terminate(force=True)


def _terminal_signals() -> None:
    """The child's SIGINT as a terminal gives it, whatever this test process inherited (a CI
    runner's background job ignores it; a thread may have blocked it): the CI's pure pass saw
    no ``^C`` at all after three Ctrl-C presses."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def command(child: pexpect.spawn, line: str) -> str:
    """Type ``line``, Enter, and return what was printed before the next prompt (the echo removed)."""
    child.sendline(line)
    child.expect_exact(">> ")
    text = child.before.replace("\r\n", "\n")
    return text[text.index("\n") + 1:] if "\n" in text else ""


def test_interactive_session(session):
    c = session
    assert command(c, "ls") == "image  local\n"
    # Tab completes a directory with its slash, and again inside it
    c.send("cd im\t")
    c.expect_exact("cd image/")
    c.send("to\t")
    c.expect_exact("topics/")  # (the terminal shows what completion adds)
    c.send("byN\t")
    c.expect_exact("Name/")
    assert command(c, "") == ""
    assert command(c, "pwd") == "/image/topics/byName\n"
    listing = command(c, "ls")
    # in columns for the 100-column terminal, down then across (Kafka's layout)
    assert listing == ("Retry.TestTopicPatient  batch2.work.notification.SHR_PROD.persistence\n"
                       "TestTopicPatient        subscription.matching.SHR_PROD.persistence\n"
                       "__consumer_offsets      \n")
    # a file completes with a space; the command then runs
    c.send("cat __c\t")
    c.expect_exact("__consumer_offsets/")
    c.send("na\t")
    c.expect_exact("name ")
    assert command(c, "") == "__consumer_offsets\n"
    assert command(c, "cat __consumer_offsets/0").startswith("PartitionRegistration(replicas=[1], directories=[")
    # two candidates: the first Tab completes the common part, the second lists them
    c.send("c\t\t")
    c.expect(r"cat\s+cd\s*\r\n>> c")  # the list, then the prompt and the line again
    c.send("\x15")  # Ctrl-U: clear the line
    assert command(c, "") == ""
    assert command(c, "cd nope") == "cd: nope: no such directory.\n"
    assert command(c, "blah") == ("invalid choice: 'blah' (choose from 'cat', 'cd', 'diff', 'exit', 'find', 'help', "
                                  "'history', 'ls', 'man', 'pwd', 'tree')\n")
    assert command(c, "man pwd").startswith("pwd: Print the current working directory.\n")
    assert command(c, "help").startswith("Welcome to the Apache Kafka metadata shell.\n")
    assert command(c, "diff 4927 --text") == ""  # a NoOpRecord: nothing to say
    assert command(c, "diff 4 5 --text").startswith("RegisterControllerRecord(controllerId=1, incarnationId=")
    history = command(c, "history 4").splitlines()
    assert history == ["    9  help", "   10  diff 4927 --text", "   11  diff 4 5 --text", "   12  history 4"]
    assert command(c, "history").splitlines()[0] == "    0  ls"
    # Ctrl-C abandons the line; Ctrl-D or exit ends the shell
    c.send("ls /ima")
    c.expect_exact("ls /ima")  # typed (readline is back waiting for a key, as for a person)
    # CPython's readline sees a SIGINT only while it waits in select(): one that lands while it is
    # still handling the last key is acted on at the next key (a CI run at load ~10 waited 60 s
    # for "^C").  A person presses Ctrl-C again; so does this test, at most three times.
    for attempt in range(3):
        c.sendcontrol("c")
        try:
            c.expect_exact("^C", timeout=5)
            break
        except pexpect.TIMEOUT:
            if attempt == 2:
                raise
    c.expect_exact(">> ")
    c.sendline("exit")
    c.expect(pexpect.EOF)
    c.close()
    assert c.exitstatus == 0


def test_interactive_end_of_input(session):
    session.sendcontrol("d")
    session.expect(pexpect.EOF)
    session.close()
    assert session.exitstatus == 0


def test_commands_piped_in(fixtures_dir):
    """Without a terminal the same loop reads lines (no editing); the output is the same."""
    p = subprocess.run(SHELL + ["-d", str(fixtures_dir / "kafka-4.0.0-combined-single-node")],
                       input="cd image/features\nls\ncat metadataVersion\nhistory\n", capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("Loading...\nStarting...\n[ Kafka Metadata Shell ]\n>> >> "
                        "finalized_group.version\nfinalized_transaction.version\nmetadataVersion\n"
                        ">> 4.0-IV3\n>>     0  cd image/features\n    1  ls\n    2  cat metadataVersion\n"
                        "    3  history\n>> \n")


def test_image_node_views_are_lazy(fixtures_dir):
    """Listing byName touches no topic: the nodes are views over the persistent maps."""
    image = image_at(fixtures_dir / "kafka-3.6.0-cp7.6.0-snapshot")
    state = MetadataShellState(RootShellNode(image))
    by_name = state.root.child("image").child("topics").child("byName")
    assert sorted(by_name.child_names()) == sorted(image.topics.topics_by_name.keys())
    assert by_name.child("nope") is None and by_name.child("__consumer_offsets").child("id").text == str(
        image.topics.topics_by_name["__consumer_offsets"].topic_id)
