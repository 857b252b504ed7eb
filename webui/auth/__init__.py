"""Sign-in: users and salted passwords (``passwords``), the limiter of failed sign-ins
(``limiter``), and the login wall in front of gradio (``wall``: no API description for
signed-out visitors, sign-in limits, same-site sign-in posts, anti-framing headers, client
addresses from a trusted proxy only).

Standard library only at import time (``launch.py`` imports it before gradio).
"""
from webui.auth.limiter import LoginLimiter
from webui.auth.passwords import (HASH_ITERATIONS, HASH_SCHEME, USER_NAME, Credentials,
                                  hash_password, is_password_hash, load_auth_file,
                                  login_message, parse_auth_line)
from webui.auth.wall import MAX_LOGIN_BODY, LoginWall, blank_api_info

__all__ = ["LoginLimiter", "Credentials", "HASH_ITERATIONS", "HASH_SCHEME", "USER_NAME",
           "hash_password", "is_password_hash", "load_auth_file", "login_message",
           "parse_auth_line", "LoginWall", "MAX_LOGIN_BODY", "blank_api_info"]
