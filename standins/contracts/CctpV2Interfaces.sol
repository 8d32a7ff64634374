// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @notice What a MessageTransmitterV2 offers to the contracts that send through it (Circle's
/// IRelayerV2#sendMessage): the nonce is not returned, Circle's attester assigns it off-chain.
interface IRelayerV2 {
    function sendMessage(
        uint32 destinationDomain,
        bytes32 recipient,
        bytes32 destinationCaller,
        uint32 minFinalityThreshold,
        bytes calldata messageBody
    ) external;
}

/// @notice What a MessageTransmitterV2 calls on a message's recipient (Circle's
/// IMessageHandlerV2): below the finalized threshold (2000) the unfinalized handler.
interface IMessageHandlerV2 {
    function handleReceiveFinalizedMessage(
        uint32 sourceDomain,
        bytes32 sender,
        uint32 finalityThresholdExecuted,
        bytes calldata messageBody
    ) external returns (bool);

    function handleReceiveUnfinalizedMessage(
        uint32 sourceDomain,
        bytes32 sender,
        uint32 finalityThresholdExecuted,
        bytes calldata messageBody
    ) external returns (bool);
}
