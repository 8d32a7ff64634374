"""Solana: SOL and SPL-token transfers through solana-py / solders (issue 15).

A Solana transaction names a recent blockhash and can land only until the block height passes
that blockhash's last valid height (about 150 slots). So a sent transaction that never lands
does not linger like an EVM transaction with a nonce: it dies, provably, and the transfer is
then carried by a NEW transaction on a fresh blockhash. The modules:

- ``config``: the reviewed ``kind: solana`` entries of ``venues/chains.yaml``;
- ``amounts``: Decimal amounts to lamports / token base units, exactly or not at all;
- ``keys``: the built-in signer's keypair, read from the env var or file the config names;
- ``rpc``: a synchronous face over solana-py's async client, errors mapped to the taxonomy;
- ``transactions``: build and sign a transfer, and the signed payload persisted before send;
- ``fate``: what a signature's status and the chain's height prove about a transaction;
- ``executors``: ``solana_transfer`` and ``solana_transfer_observe``.
"""
