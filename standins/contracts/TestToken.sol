// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC20} from "./ERC20.sol";

/// @title TestToken
/// @notice An ERC-20 for the devchain with any number of decimals (deploy it with 6 and with 18).
/// The owner mints, and can make transfers revert, for every holder at once
/// (`setTransfersBlocked`) or for one account as sender or recipient (`setBlocked`, like a
/// stablecoin's blocklist), so the "reverting ERC-20 transfer" path can be exercised on a chain.
contract TestToken is ERC20 {
    address public owner;
    bool public transfersBlocked;
    mapping(address => bool) public blocked;

    event TransfersBlocked(bool blocked);
    event AccountBlocked(address indexed account, bool blocked);

    modifier onlyOwner() {
        require(msg.sender == owner, "TestToken: caller is not the owner");
        _;
    }

    constructor(string memory name_, string memory symbol_, uint8 decimals_)
        ERC20(name_, symbol_, decimals_)
    {
        owner = msg.sender;
    }

    function mint(address to, uint256 value) external onlyOwner {
        _mint(to, value);
    }

    function setTransfersBlocked(bool blocked_) external onlyOwner {
        transfersBlocked = blocked_;
        emit TransfersBlocked(blocked_);
    }

    function setBlocked(address account, bool blocked_) external onlyOwner {
        blocked[account] = blocked_;
        emit AccountBlocked(account, blocked_);
    }

    function _beforeTransfer(address from, address to, uint256) internal view override {
        require(!transfersBlocked, "TestToken: transfers are blocked");
        require(!blocked[from] && !blocked[to], "TestToken: account is blocked");
    }
}
