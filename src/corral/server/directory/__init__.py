"""Directory login: LDAP binds and OpenID Connect, turned into a DirectoryIdentity (user name and groups)."""
