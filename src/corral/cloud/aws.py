"""The `aws` provider: a cloud pool's machines as EC2 instances, through boto3 (imported lazily: a server without
boto3 imports this module fine and runs every pool but an aws one).

A machine is one `run_instances` of the pool's AMI, tagged corral-cluster / corral-pool / corral-node (and Name),
its user data the boot script of corral.cloud.userdata (join token in a 0600 file, install, `corral agent` under
systemd). A restarted server finds its machines again by those tags. Credentials come from boto3's default chain
(environment, shared config, the server's instance profile), never from a pool's settings.

Settings (all strings; `check_aws_settings` says which key is wrong):
  ami (required), subnet_id, security_group_ids (comma-separated), key_name, iam_instance_profile (name or ARN),
  endpoint_url (a private endpoint, or moto in tests), install_command, spot_max_price, cluster (the tag value).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from corral.cloud.base import (
    GONE,
    PENDING,
    RUNNING,
    STOPPING,
    TAG_CLUSTER,
    TAG_NODE,
    TAG_POOL,
    Instance,
    LaunchRequest,
    ProviderError,
    compute_tags,
)
from corral.cloud.userdata import compute_user_data, default_install_command

SETTINGS = (
    "ami",
    "subnet_id",
    "security_group_ids",
    "key_name",
    "iam_instance_profile",
    "endpoint_url",
    "install_command",
    "spot_max_price",
    "cluster",
)
AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")
SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8,17}$")
KEY_NAME = re.compile(r"^[\x20-\x7e]{1,255}$")
PROFILE_NAME = re.compile(r"^[\w+=,.@-]{1,128}$")
PROFILE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:instance-profile/[\w+=,.@/-]{1,512}$")
CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d{1,2}$")
MAX_INSTALL_COMMAND = 4096
SPOT_NOTICE_S = 120.0  # EC2 gives a spot instance two minutes between the notice and taking it back
SPOT_MARKED = "marked-for-termination"  # the spot request's status code once the notice is given
MAX_FILTER_VALUES = 200  # EC2's limit on the values of one filter

# EC2's instance states onto the protocol's (stopped counts as stopping: a corral node is never stopped on purpose)
STATES = {
    "pending": PENDING,
    "running": RUNNING,
    "shutting-down": STOPPING,
    "stopping": STOPPING,
    "stopped": STOPPING,
    "terminated": GONE,
}


def check_aws_settings(settings: Mapping[str, str]) -> None:
    """Raises ProviderError naming the first bad key (unknown, missing `ami`, or a malformed value)."""
    for key in settings:
        if key not in SETTINGS:
            raise ProviderError(f"settings.{key}: not an aws setting (known: {', '.join(SETTINGS)})")
    if not settings.get("ami"):
        raise ProviderError("settings.ami: an aws pool needs the AMI its machines boot (ami-...)")
    _match("ami", settings["ami"], AMI, "an AMI id such as ami-0123456789abcdef0")
    if "subnet_id" in settings:
        _match("subnet_id", settings["subnet_id"], SUBNET, "a subnet id such as subnet-0123456789abcdef0")
    if "security_group_ids" in settings:
        for group in _split(settings["security_group_ids"]) or [""]:
            _match("security_group_ids", group, SECURITY_GROUP, "comma-separated ids such as sg-0123456789abcdef0")
    if "key_name" in settings:
        _match("key_name", settings["key_name"], KEY_NAME, "an EC2 key pair's name (printable ASCII, 1..255)")
    if "iam_instance_profile" in settings:
        value = settings["iam_instance_profile"]
        pattern = PROFILE_ARN if value.startswith("arn:") else PROFILE_NAME
        _match("iam_instance_profile", value, pattern, "an instance profile's name or ARN")
    if "endpoint_url" in settings:
        url = urlsplit(settings["endpoint_url"])
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ProviderError(f"settings.endpoint_url: {settings['endpoint_url']!r} is not an http(s) URL")
    if "install_command" in settings:
        command = settings["install_command"]
        if not command.strip() or "\0" in command or len(command) > MAX_INSTALL_COMMAND:
            raise ProviderError(f"settings.install_command: must be a shell command of 1..{MAX_INSTALL_COMMAND}")
    if "spot_max_price" in settings:
        _check_price(settings["spot_max_price"])
    if "cluster" in settings:
        _match("cluster", settings["cluster"], CLUSTER, "letters, digits, '.', '_' or '-', at most 63")


def _match(key: str, value: str, pattern: re.Pattern[str], what: str) -> None:
    if not pattern.fullmatch(value):
        raise ProviderError(f"settings.{key}: {value!r} is not {what}")


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _check_price(value: str) -> None:
    try:
        price = float(value)
    except ValueError:
        price = math.nan
    if not (math.isfinite(price) and 0 < price <= 10_000):
        raise ProviderError(f"settings.spot_max_price: {value!r} is not a price per hour such as 0.50")


@contextmanager
def _aws_errors(action: str, gone_ok: bool = False) -> Iterator[None]:
    """botocore's errors (an API error, no endpoint, no credentials, bad parameters) as one-line ProviderErrors;
    `gone_ok`: an unknown instance id (InvalidInstanceID.NotFound) is swallowed, the block left where it failed."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as e:
        if gone_ok and _error_code(e) == "InvalidInstanceID.NotFound":
            return
        raise ProviderError(f"aws {action}: {_error_code(e)}: {_one_line(_error_message(e))}") from e
    except BotoCoreError as e:
        raise ProviderError(f"aws {action}: {_one_line(str(e))}") from e


def _error_code(e: Any) -> str:
    return str(e.response.get("Error", {}).get("Code", "Unknown"))


def _error_message(e: Any) -> str:
    return str(e.response.get("Error", {}).get("Message", "")) or str(e)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class AwsProvider:
    """One aws pool's machines (see the module's docstring). Thread-safe as boto3's clients are."""

    name = "aws"

    def __init__(self, pool: str, region: str, settings: Mapping[str, str]) -> None:
        check_aws_settings(settings)
        if region and not REGION.fullmatch(region):
            raise ProviderError(f"region: {region!r} is not an AWS region such as us-east-1")
        try:
            import boto3
            from botocore.config import Config
        except ImportError as e:
            raise ProviderError("the aws provider needs boto3: pip install 'corral[aws]'") from e
        self.pool = pool
        self.region = region
        self.settings = dict(settings)
        self.cluster = settings.get("cluster", "corral")
        self.install_command = settings.get("install_command") or default_install_command()
        config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=10, read_timeout=60)
        with _aws_errors("client"):  # no region anywhere (pool, environment, config): NoRegionError
            self._ec2: Any = boto3.session.Session().client(
                "ec2", region_name=region or None, endpoint_url=settings.get("endpoint_url") or None, config=config
            )

    # ---- launch --------------------------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> str:
        """The id of the live instance of `request.node_name`, started now unless one is pending or running."""
        with _aws_errors("describe_instances"):
            live = self._describe(
                {TAG_NODE: request.node_name}, states=("pending", "running"), ignore_cluster_pool=False
            )
        if live:
            return str(live[0]["InstanceId"])
        with _aws_errors("run_instances"):
            reply = self._ec2.run_instances(**self.compute_run_args(request))
        return str(reply["Instances"][0]["InstanceId"])

    def compute_run_args(self, request: LaunchRequest) -> dict[str, Any]:
        """run_instances' arguments for `request` (pure)."""
        tags = {**request.tags, "Name": request.node_name, **compute_tags(self.pool, request.node_name, self.cluster)}
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        args: dict[str, Any] = {
            "ImageId": self.settings["ami"],
            "InstanceType": request.instance_type.name,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": compute_user_data(request, self.install_command),
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if subnet := self.settings.get("subnet_id"):
            args["SubnetId"] = subnet
        if groups := _split(self.settings.get("security_group_ids", "")):
            args["SecurityGroupIds"] = groups
        if key := self.settings.get("key_name"):
            args["KeyName"] = key
        if profile := self.settings.get("iam_instance_profile"):
            args["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
        if request.instance_type.spot:
            spot: dict[str, str] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if price := self.settings.get("spot_max_price"):
                spot["MaxPrice"] = price
            args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        return args

    # ---- terminate -----------------------------------------------------------------------------------------
    def terminate(self, provider_id: str) -> None:
        """Terminate the instance; one already gone is not an error. An instance that is there but not this pool's
        (its tags say another pool or cluster) is refused: a pool only ever ends its own machines."""
        for raw in self._describe_gone_ok(provider_id):
            tags = _tags(raw)
            if tags.get(TAG_POOL) != self.pool or tags.get(TAG_CLUSTER) != self.cluster:
                raise ProviderError(f"aws terminate: {provider_id} is not a machine of pool {self.pool!r}")
        with _aws_errors("terminate_instances", gone_ok=True):
            self._ec2.terminate_instances(InstanceIds=[provider_id])

    def _describe_gone_ok(self, provider_id: str) -> list[dict[str, Any]]:
        """The instance `provider_id` as describe_instances sees it; [] when EC2 does not know it (gone long ago,
        or launched a moment ago and not visible yet: terminate_instances is asked anyway)."""
        with _aws_errors("describe_instances", gone_ok=True):
            return self._describe({}, instance_ids=[provider_id], ignore_cluster_pool=True)
        return []

    # ---- list ----------------------------------------------------------------------------------------------
    def list_instances(self) -> list[Instance]:
        """This pool's instances (terminated ones too, while EC2 still lists them), with spot notices."""
        with _aws_errors("describe_instances"):
            raws = self._describe({}, ignore_cluster_pool=False)
        live_spot = [r for r in raws if r.get("InstanceLifecycle") == "spot" and _state(r) in (PENDING, RUNNING)]
        marked = self._load_spot_notices([r["InstanceId"] for r in live_spot])
        return [compute_instance(raw, raw["InstanceId"] in marked) for raw in raws]

    def _load_spot_notices(self, instance_ids: list[str]) -> set[str]:
        """The spot instances among `instance_ids` whose request is marked for termination (best effort: an error
        here only loses the notice, the autoscaler still sees the instance go)."""
        marked: set[str] = set()
        for start in range(0, len(instance_ids), MAX_FILTER_VALUES):
            chunk = instance_ids[start : start + MAX_FILTER_VALUES]
            try:
                with _aws_errors("describe_spot_instance_requests"):
                    pages = self._ec2.get_paginator("describe_spot_instance_requests").paginate(
                        Filters=[{"Name": "instance-id", "Values": chunk}]
                    )
                    for page in pages:
                        for req in page.get("SpotInstanceRequests", []):
                            if req.get("Status", {}).get("Code") == SPOT_MARKED and req.get("InstanceId"):
                                marked.add(str(req["InstanceId"]))
            except ProviderError:
                continue
        return marked

    def _describe(
        self,
        tags: Mapping[str, str],
        *,
        ignore_cluster_pool: bool,
        states: tuple[str, ...] = (),
        instance_ids: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every instance (all pages) with `tags` (and this pool's and cluster's unless told not to)."""
        wanted = dict(tags) if ignore_cluster_pool else {TAG_CLUSTER: self.cluster, TAG_POOL: self.pool, **tags}
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in wanted.items()]
        if states:
            filters.append({"Name": "instance-state-name", "Values": list(states)})
        args: dict[str, Any] = {"Filters": filters} if filters else {}
        if instance_ids is not None:
            args["InstanceIds"] = instance_ids
        found: list[dict[str, Any]] = []
        for page in self._ec2.get_paginator("describe_instances").paginate(**args):
            for reservation in page.get("Reservations", []):
                found.extend(reservation.get("Instances", []))
        return found


def compute_instance(raw: Mapping[str, Any], spot_notice: bool = False) -> Instance:
    """One of describe_instances' instances as the protocol's Instance (pure)."""
    spot = raw.get("InstanceLifecycle") == "spot"
    state = _state(raw)
    return Instance(
        provider_id=str(raw["InstanceId"]),
        node_name=_tags(raw).get(TAG_NODE, ""),
        state=state,
        instance_type=str(raw.get("InstanceType", "")),
        spot=spot,
        interruption_s=SPOT_NOTICE_S if spot and spot_notice and state in (PENDING, RUNNING) else None,
    )


def _state(raw: Mapping[str, Any]) -> str:
    return STATES.get(str(raw.get("State", {}).get("Name", "")), STOPPING)  # an unknown state: not usable


def _tags(raw: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in raw.get("Tags", [])}


__all__ = ["SETTINGS", "AwsProvider", "check_aws_settings", "compute_instance"]
