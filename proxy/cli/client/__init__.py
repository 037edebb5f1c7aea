"""The command line's client side: `tenant-gateway login | credential | logout`.

kubectl runs `tenant-gateway credential` before every command, so this
package imports nothing but the standard library (no aiohttp, no database
driver): a cached token is answered in tens of milliseconds. The stored
gateway session lives in `$XDG_CONFIG_HOME/tenant-gateway/credentials.json`
(0600, one entry per gateway); workspace tokens are cached beside it until
ten minutes before they expire, and a file lock makes concurrent kubectl
processes mint one token between them. No identity provider token is ever
written: the file holds a gateway session, revocable at the gateway.
"""
