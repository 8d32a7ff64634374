"""EVM chains through web3.py and eth-account: QTG's own nonces, signed bytes stored before
broadcast, fee bumps, reorgs and finality (issue 12). ``executors`` registers ``evm_transfer``
and the real ``chain_tx_observe``; ``local`` starts an anvil devchain for ``make run``."""
