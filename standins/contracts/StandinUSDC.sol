// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC20} from "./ERC20.sol";

/// @title StandinUSDC
/// @notice A 6-decimal USDC-like token for the CCTP stand-in. The owner mints test balances and
/// names minters (the chain's TokenMessenger); a minter mints on receipt of a CCTP message and
/// burns what was deposited to it for a burn, as Circle's FiatToken does for its minters.
contract StandinUSDC is ERC20 {
    address public owner;
    mapping(address => bool) public isMinter;

    event MinterConfigured(address indexed minter, bool enabled);
    event Mint(address indexed minter, address indexed to, uint256 amount);
    event Burn(address indexed burner, uint256 amount);

    constructor() ERC20("USD Coin (stand-in)", "USDC", 6) {
        owner = msg.sender;
    }

    function configureMinter(address minter, bool enabled) external {
        require(msg.sender == owner, "StandinUSDC: caller is not the owner");
        isMinter[minter] = enabled;
        emit MinterConfigured(minter, enabled);
    }

    function mint(address to, uint256 amount) external returns (bool) {
        require(msg.sender == owner || isMinter[msg.sender], "StandinUSDC: caller is not a minter");
        require(amount > 0, "StandinUSDC: mint amount not greater than 0");
        _mint(to, amount);
        emit Mint(msg.sender, to, amount);
        return true;
    }

    /// @notice Burns from the caller's own balance (a minter burns what was deposited to it).
    function burn(uint256 amount) external {
        require(isMinter[msg.sender], "StandinUSDC: caller is not a minter");
        require(amount > 0, "StandinUSDC: burn amount not greater than 0");
        _burn(msg.sender, amount);
        emit Burn(msg.sender, amount);
    }
}
