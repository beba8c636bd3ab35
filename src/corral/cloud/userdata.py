"""The boot script a cloud machine runs once (EC2 user data, run by cloud-init as root): it joins the machine to the
cluster as the node it was launched for (pure: the script is text; nothing here touches a machine).

What the script does, in order:
1. writes the one-time join token to /etc/corral/join-token (mode 0600, made under umask 077), from a quoted
   here-document: the token is never an argument of any command (no `ps`, no /proc/*/cmdline) and never echoed;
2. runs the pool's install command (an admin's shell command; by default `pip install corral==<this version>`);
3. writes /etc/corral/run-agent, which execs `corral agent --join URL --token-file /etc/corral/join-token
   --node-name NAME`, and the systemd unit corral-agent.service (Restart=always) that runs it, then enables and
   starts the unit.

Every value that comes from a request (the join URL, the node name, the token) is quoted with shlex.quote or kept
inside a quoted here-document, so no value can end its quoting and run as a command. The token is the only secret
in the script; the user data stays readable from the machine's metadata service, which is why the token is
bound to the node's name, spent by the first join, and expires with the join timeout.
"""

from __future__ import annotations

import shlex

from corral import __version__
from corral.cloud.base import LaunchRequest, ProviderError

TOKEN_PATH = "/etc/corral/join-token"
RUN_AGENT_PATH = "/etc/corral/run-agent"
UNIT_NAME = "corral-agent.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
MAX_USER_DATA_BYTES = 16 * 1024  # EC2's limit on user data (before base64)
_TOKEN_END = "CORRAL_JOIN_TOKEN_END"  # the here-document's delimiter: a token line can never equal it (checked)

UNIT = """[Unit]
Description=Corral agent (joins this machine to a Corral cluster)
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/etc/corral/run-agent
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"""


def default_install_command() -> str:
    """What installs corral on a new machine when the pool does not say: this server's own version from PyPI."""
    return f"pip install corral=={__version__}"


def compute_user_data(request: LaunchRequest, install_command: str) -> str:
    """The `#!/bin/bash` boot script for `request` (see the module's docstring). Raises ProviderError when the token
    is not one line or the script would exceed EC2's 16 KiB."""
    token = request.join_token
    if not token or any(c in token for c in "\r\n\0") or token == _TOKEN_END:
        raise ProviderError("the join token must be one non-empty line")
    if not install_command.strip() or "\0" in install_command:
        raise ProviderError("install_command: must be a non-empty shell command")
    agent_args = shlex.join(
        ["agent", "--join", request.join_url, "--token-file", TOKEN_PATH, "--node-name", request.node_name]
    )
    script = "\n".join(
        [
            "#!/bin/bash",
            "# Corral's boot script: join this machine to the cluster as the node it was launched for.",
            "set -euo pipefail",
            "",
            "# 1. The one-time join token: only in this file (0600), never on a command line.",
            "install -d -m 0700 /etc/corral",
            f"(umask 077 && cat > {TOKEN_PATH} <<'{_TOKEN_END}'",
            token,
            _TOKEN_END,
            ")",
            f"chmod 0600 {TOKEN_PATH}",
            "",
            "# 2. Install corral (the pool's install_command).",
            install_command,
            'corral_bin="$(command -v corral)" || { echo "corral: the install command put no corral on PATH" >&2; exit 1; }',
            "",
            "# 3. Run the agent under systemd.",
            "{",
            "  printf '%s\\n' '#!/bin/bash'",
            "  printf 'exec %q' \"$corral_bin\"",
            f"  printf ' %s\\n' {shlex.quote(agent_args)}",
            f"}} > {RUN_AGENT_PATH}",
            f"chmod 0700 {RUN_AGENT_PATH}",
            f"cat > {UNIT_PATH} <<'CORRAL_UNIT_END'",
            UNIT.rstrip("\n"),
            "CORRAL_UNIT_END",
            f"chmod 0644 {UNIT_PATH}",
            f"systemctl daemon-reload && systemctl enable --now {UNIT_NAME}",
            "",
        ]
    )
    size = len(script.encode())
    if size > MAX_USER_DATA_BYTES:
        raise ProviderError(
            f"the boot script is {size} bytes, over EC2's {MAX_USER_DATA_BYTES}-byte user-data limit "
            "(shorten install_command)"
        )
    return script


__all__ = ["MAX_USER_DATA_BYTES", "TOKEN_PATH", "UNIT_PATH", "compute_user_data", "default_install_command"]
