"""The integrator contract's version: one constant for the OpenAPI document's ``info.version``,
the webhook payloads' ``version``, the webhook ``User-Agent`` and the API's ``QTG-Contract``
response header. docs/contract-changelog.md says what each version changed."""

CONTRACT_VERSION = "1.2"
CONTRACT_HEADER = "QTG-Contract"
