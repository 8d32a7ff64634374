// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IMessageHandler, IMessageTransmitter, IMintBurnToken} from "./CctpInterfaces.sol";

/// @title TokenMessenger
/// @notice A minimal stand-in for Circle's CCTP v1 TokenMessenger (with the TokenMinter's token
/// table folded in). `depositForBurn` takes the tokens (the depositor approves this contract
/// first), burns them and sends a burn message through the local MessageTransmitter; on the
/// destination chain the transmitter calls `handleReceiveMessage`, which mints.
///
/// The per-message burn limit has the shape of Circle's contracts: `localMinter()` names the
/// TokenMinter (this contract itself here) whose `burnLimitsPerMessage(token)` is the most one
/// `depositForBurn` may burn, set by `setMaxBurnAmountPerMessage` (Circle's TokenController).
///
/// Burn message body layout (abi.encodePacked):
///   field           bytes   type      offset
///   version         4       uint32    0
///   burnToken       32      bytes32   4    (the token's address on the source chain)
///   mintRecipient   32      bytes32   36
///   amount          32      uint256   68
///   messageSender   32      bytes32   100  (the depositor)
contract TokenMessenger is IMessageHandler {
    uint256 private constant BURN_MESSAGE_LENGTH = 132;

    IMessageTransmitter public immutable localMessageTransmitter;
    uint32 public immutable messageBodyVersion;
    address public owner;
    // destination domain => the TokenMessenger there, as bytes32
    mapping(uint32 => bytes32) public remoteTokenMessengers;
    // local tokens that may be burned here
    mapping(address => bool) public burnableTokens;
    // keccak256(abi.encodePacked(remoteDomain, remoteToken)) => local token to mint
    mapping(bytes32 => address) public remoteTokensToLocalTokens;
    // local token => the most one message may burn (Circle's TokenController)
    mapping(address => uint256) public burnLimitsPerMessage;

    event DepositForBurn(
        uint64 indexed nonce,
        address indexed burnToken,
        uint256 amount,
        address indexed depositor,
        bytes32 mintRecipient,
        uint32 destinationDomain,
        bytes32 destinationTokenMessenger,
        bytes32 destinationCaller
    );
    event MintAndWithdraw(address indexed mintRecipient, uint256 amount, address indexed mintToken);
    event RemoteTokenMessengerAdded(uint32 domain, bytes32 tokenMessenger);
    event TokenPairLinked(address localToken, uint32 remoteDomain, bytes32 remoteToken);
    event SetBurnLimitPerMessage(address indexed token, uint256 burnLimitPerMessage);

    modifier onlyOwner() {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        _;
    }

    constructor(address messageTransmitter, uint32 messageBodyVersion_) {
        require(messageTransmitter != address(0), "MessageTransmitter not set");
        localMessageTransmitter = IMessageTransmitter(messageTransmitter);
        messageBodyVersion = messageBodyVersion_;
        owner = msg.sender;
    }

    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) external onlyOwner {
        require(tokenMessenger != bytes32(0), "bytes32(0) not allowed");
        require(remoteTokenMessengers[domain] == bytes32(0), "TokenMessenger already set");
        remoteTokenMessengers[domain] = tokenMessenger;
        emit RemoteTokenMessengerAdded(domain, tokenMessenger);
    }

    /// @notice `localToken` may be burned here, and a burn of `remoteToken` on `remoteDomain`
    /// mints `localToken` here.
    function linkTokenPair(address localToken, uint32 remoteDomain, bytes32 remoteToken)
        external
        onlyOwner
    {
        bytes32 key = keccak256(abi.encodePacked(remoteDomain, remoteToken));
        require(remoteTokensToLocalTokens[key] == address(0), "Unable to link token pair");
        remoteTokensToLocalTokens[key] = localToken;
        burnableTokens[localToken] = true;
        if (burnLimitsPerMessage[localToken] == 0) {
            burnLimitsPerMessage[localToken] = type(uint256).max;
        }
        emit TokenPairLinked(localToken, remoteDomain, remoteToken);
    }

    /// @notice The TokenMinter whose burn limits apply (Circle's layout: a separate contract).
    function localMinter() external view returns (address) {
        return address(this);
    }

    function setMaxBurnAmountPerMessage(address localToken, uint256 burnLimitPerMessage)
        external
        onlyOwner
    {
        burnLimitsPerMessage[localToken] = burnLimitPerMessage;
        emit SetBurnLimitPerMessage(localToken, burnLimitPerMessage);
    }

    function depositForBurn(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken
    ) external returns (uint64 nonce) {
        require(amount > 0, "Amount must be nonzero");
        require(mintRecipient != bytes32(0), "Mint recipient must be nonzero");
        bytes32 destinationMessenger = remoteTokenMessengers[destinationDomain];
        require(destinationMessenger != bytes32(0), "No TokenMessenger for domain");
        require(burnableTokens[burnToken], "Burn token not supported");
        require(amount <= burnLimitsPerMessage[burnToken], "Burn amount exceeds per tx limit");

        IMintBurnToken token = IMintBurnToken(burnToken);
        require(token.transferFrom(msg.sender, address(this), amount), "Transfer operation failed");
        token.burn(amount);

        bytes memory body = abi.encodePacked(
            messageBodyVersion,
            bytes32(uint256(uint160(burnToken))),
            mintRecipient,
            amount,
            bytes32(uint256(uint160(msg.sender)))
        );
        nonce = localMessageTransmitter.sendMessage(destinationDomain, destinationMessenger, body);
        emit DepositForBurn(
            nonce,
            burnToken,
            amount,
            msg.sender,
            mintRecipient,
            destinationDomain,
            destinationMessenger,
            bytes32(0)
        );
    }

    function handleReceiveMessage(uint32 remoteDomain, bytes32 sender, bytes calldata messageBody)
        external
        override
        returns (bool)
    {
        require(
            msg.sender == address(localMessageTransmitter), "Invalid message transmitter"
        );
        require(
            sender != bytes32(0) && remoteTokenMessengers[remoteDomain] == sender,
            "Remote TokenMessenger unsupported"
        );
        require(messageBody.length == BURN_MESSAGE_LENGTH, "Invalid message length");
        require(
            uint32(bytes4(messageBody[0:4])) == messageBodyVersion, "Invalid message body version"
        );
        bytes32 burnToken = bytes32(messageBody[4:36]);
        address mintRecipient = address(uint160(uint256(bytes32(messageBody[36:68]))));
        uint256 amount = uint256(bytes32(messageBody[68:100]));

        address localToken =
            remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, burnToken))];
        require(localToken != address(0), "Mint token not supported");
        require(IMintBurnToken(localToken).mint(mintRecipient, amount), "Mint failed");
        emit MintAndWithdraw(mintRecipient, amount, localToken);
        return true;
    }
}
