// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @notice What a MessageTransmitter offers to the contracts that send through it.
interface IMessageTransmitter {
    function sendMessage(uint32 destinationDomain, bytes32 recipient, bytes calldata messageBody)
        external
        returns (uint64);
}

/// @notice What a MessageTransmitter calls on a message's recipient once the message is verified.
interface IMessageHandler {
    function handleReceiveMessage(uint32 sourceDomain, bytes32 sender, bytes calldata messageBody)
        external
        returns (bool);
}

/// @notice The token side of CCTP: a minter mints on receipt and burns what was deposited to it.
interface IMintBurnToken {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
    function mint(address to, uint256 amount) external returns (bool);
    function burn(uint256 amount) external;
}
