// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IMintBurnToken} from "./CctpInterfaces.sol";
import {IMessageHandlerV2, IRelayerV2} from "./CctpV2Interfaces.sol";

/// @title TokenMessengerV2
/// @notice QTG's minimal stand-in for Circle's CCTP V2 TokenMessengerV2 (checked against
/// circlefin/evm-cctp-contracts src/v2/TokenMessengerV2.sol, BaseTokenMessenger.sol,
/// src/messages/v2/BurnMessageV2.sol and src/roles/TokenController.sol), with the
/// TokenMinterV2's token table and per-message burn limits folded in (`localMinter()` is this
/// contract). A burn names `maxFee` and `minFinalityThreshold`; the attester writes the fee it
/// charged (`feeExecuted`) into the message, and the mint pays `amount - feeExecuted` to the
/// recipient and `feeExecuted` to `feeRecipient`.
///
/// Burn message body layout (abi.encodePacked):
///   field           bytes   type      offset
///   version         4       uint32    0
///   burnToken       32      bytes32   4
///   mintRecipient   32      bytes32   36
///   amount          32      uint256   68
///   messageSender   32      bytes32   100
///   maxFee          32      uint256   132
///   feeExecuted     32      uint256   164  (zero when burned; set by the attester)
///   expirationBlock 32      uint256   196  (zero when burned; set by the attester, 0 = never)
///   hookData        dynamic bytes     228
contract TokenMessengerV2 is IMessageHandlerV2 {
    uint256 private constant HOOK_DATA_INDEX = 228;
    uint32 private constant TOKEN_MESSENGER_MIN_FINALITY_THRESHOLD = 500;
    uint256 public constant MIN_FEE_MULTIPLIER = 10_000_000;

    address public immutable localMessageTransmitter;
    uint32 public immutable messageBodyVersion;
    address public owner;
    address public feeRecipient;
    // minimum fee, in units of 1/MIN_FEE_MULTIPLIER of the amount (0: none)
    uint256 public minFee;
    mapping(uint32 => bytes32) public remoteTokenMessengers;
    // keccak256(abi.encodePacked(remoteDomain, remoteToken)) => local token to mint
    mapping(bytes32 => address) public remoteTokensToLocalTokens;
    // local token => the most one message may burn; 0: the token may not be burned
    mapping(address => uint256) public burnLimitsPerMessage;

    event DepositForBurn(
        address indexed burnToken,
        uint256 amount,
        address indexed depositor,
        bytes32 mintRecipient,
        uint32 destinationDomain,
        bytes32 destinationTokenMessenger,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 indexed minFinalityThreshold,
        bytes hookData
    );
    event MintAndWithdraw(
        address indexed mintRecipient,
        uint256 amount,
        address indexed mintToken,
        uint256 feeCollected
    );
    event RemoteTokenMessengerAdded(uint32 domain, bytes32 tokenMessenger);
    event TokenPairLinked(address localToken, uint32 remoteDomain, bytes32 remoteToken);
    event SetBurnLimitPerMessage(address indexed token, uint256 burnLimitPerMessage);
    event FeeRecipientSet(address feeRecipient);
    event MinFeeSet(uint256 minFee);

    modifier onlyOwner() {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        _;
    }

    modifier onlyLocalMessageTransmitter() {
        require(msg.sender == localMessageTransmitter, "Invalid message transmitter");
        _;
    }

    modifier onlyRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) {
        require(
            tokenMessenger != bytes32(0) && remoteTokenMessengers[domain] == tokenMessenger,
            "Remote TokenMessenger unsupported"
        );
        _;
    }

    constructor(address messageTransmitter, uint32 messageBodyVersion_, address feeRecipient_) {
        require(messageTransmitter != address(0), "MessageTransmitter not set");
        require(feeRecipient_ != address(0), "Zero address not allowed");
        localMessageTransmitter = messageTransmitter;
        messageBodyVersion = messageBodyVersion_;
        feeRecipient = feeRecipient_;
        owner = msg.sender;
    }

    // -- configuration ------------------------------------------------------------------------

    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) external onlyOwner {
        require(tokenMessenger != bytes32(0), "bytes32(0) not allowed");
        require(remoteTokenMessengers[domain] == bytes32(0), "TokenMessenger already set");
        remoteTokenMessengers[domain] = tokenMessenger;
        emit RemoteTokenMessengerAdded(domain, tokenMessenger);
    }

    /// @notice A burn of `remoteToken` on `remoteDomain` mints `localToken` here. As in Circle's
    /// TokenController this does not make `localToken` burnable: setMaxBurnAmountPerMessage does.
    function linkTokenPair(address localToken, uint32 remoteDomain, bytes32 remoteToken)
        external
        onlyOwner
    {
        bytes32 key = keccak256(abi.encodePacked(remoteDomain, remoteToken));
        require(remoteTokensToLocalTokens[key] == address(0), "Unable to link token pair");
        remoteTokensToLocalTokens[key] = localToken;
        emit TokenPairLinked(localToken, remoteDomain, remoteToken);
    }

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

    function setFeeRecipient(address feeRecipient_) external onlyOwner {
        require(feeRecipient_ != address(0), "Zero address not allowed");
        feeRecipient = feeRecipient_;
        emit FeeRecipientSet(feeRecipient_);
    }

    function setMinFee(uint256 minFee_) external onlyOwner {
        require(minFee_ < MIN_FEE_MULTIPLIER, "Min fee too high");
        minFee = minFee_;
        emit MinFeeSet(minFee_);
    }

    function getMinFeeAmount(uint256 amount) external view returns (uint256) {
        if (minFee == 0) return 0;
        require(amount > 1, "Amount too low");
        return _calcMinFeeAmount(amount);
    }

    // -- burn ---------------------------------------------------------------------------------

    function depositForBurn(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold
    ) external {
        _depositForBurn(
            amount,
            destinationDomain,
            mintRecipient,
            burnToken,
            destinationCaller,
            maxFee,
            minFinalityThreshold,
            msg.data[0:0]
        );
    }

    function depositForBurnWithHook(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold,
        bytes calldata hookData
    ) external {
        require(hookData.length > 0, "Hook data is empty");
        _depositForBurn(
            amount,
            destinationDomain,
            mintRecipient,
            burnToken,
            destinationCaller,
            maxFee,
            minFinalityThreshold,
            hookData
        );
    }

    function _calcMinFeeAmount(uint256 amount) internal view returns (uint256) {
        uint256 fee = (amount * minFee) / MIN_FEE_MULTIPLIER;
        return fee == 0 ? 1 : fee;
    }

    struct Burn {
        uint256 amount;
        uint32 destinationDomain;
        bytes32 mintRecipient;
        address burnToken;
        bytes32 destinationCaller;
        uint256 maxFee;
        uint32 minFinalityThreshold;
    }

    function _depositForBurn(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold,
        bytes calldata hookData
    ) internal {
        _burn(
            Burn(
                amount,
                destinationDomain,
                mintRecipient,
                burnToken,
                destinationCaller,
                maxFee,
                minFinalityThreshold
            ),
            hookData
        );
    }

    function _burn(Burn memory b, bytes calldata hookData) internal {
        require(b.amount > 0, "Amount must be nonzero");
        require(b.mintRecipient != bytes32(0), "Mint recipient must be nonzero");
        require(b.maxFee < b.amount, "Max fee must be less than amount");
        if (minFee > 0) {
            require(b.maxFee >= _calcMinFeeAmount(b.amount), "Insufficient max fee");
        }
        bytes32 destinationMessenger = remoteTokenMessengers[b.destinationDomain];
        require(destinationMessenger != bytes32(0), "No TokenMessenger for domain");
        uint256 limit = burnLimitsPerMessage[b.burnToken];
        require(limit > 0, "Burn token not supported");
        require(b.amount <= limit, "Burn amount exceeds per tx limit");

        IMintBurnToken token = IMintBurnToken(b.burnToken);
        require(
            token.transferFrom(msg.sender, address(this), b.amount), "Transfer operation failed"
        );
        token.burn(b.amount);

        IRelayerV2(localMessageTransmitter).sendMessage(
            b.destinationDomain,
            destinationMessenger,
            b.destinationCaller,
            b.minFinalityThreshold,
            _burnMessage(b, hookData)
        );
        emit DepositForBurn(
            b.burnToken,
            b.amount,
            msg.sender,
            b.mintRecipient,
            b.destinationDomain,
            destinationMessenger,
            b.destinationCaller,
            b.maxFee,
            b.minFinalityThreshold,
            hookData
        );
    }

    function _burnMessage(Burn memory b, bytes calldata hookData)
        internal
        view
        returns (bytes memory)
    {
        return abi.encodePacked(
            messageBodyVersion,
            bytes32(uint256(uint160(b.burnToken))),
            b.mintRecipient,
            b.amount,
            bytes32(uint256(uint160(msg.sender))),
            b.maxFee,
            uint256(0), // feeExecuted
            uint256(0), // expirationBlock
            hookData
        );
    }

    // -- mint ---------------------------------------------------------------------------------

    function handleReceiveFinalizedMessage(
        uint32 remoteDomain,
        bytes32 sender,
        uint32,
        bytes calldata messageBody
    )
        external
        override
        onlyLocalMessageTransmitter
        onlyRemoteTokenMessenger(remoteDomain, sender)
        returns (bool)
    {
        return _handleReceiveMessage(remoteDomain, messageBody);
    }

    function handleReceiveUnfinalizedMessage(
        uint32 remoteDomain,
        bytes32 sender,
        uint32 finalityThresholdExecuted,
        bytes calldata messageBody
    )
        external
        override
        onlyLocalMessageTransmitter
        onlyRemoteTokenMessenger(remoteDomain, sender)
        returns (bool)
    {
        require(
            finalityThresholdExecuted >= TOKEN_MESSENGER_MIN_FINALITY_THRESHOLD,
            "Unsupported finality threshold"
        );
        return _handleReceiveMessage(remoteDomain, messageBody);
    }

    function _handleReceiveMessage(uint32 remoteDomain, bytes calldata body)
        internal
        returns (bool)
    {
        require(body.length >= HOOK_DATA_INDEX, "Invalid burn message: too short");
        require(uint32(bytes4(body[0:4])) == messageBodyVersion, "Invalid message body version");
        uint256 expirationBlock = uint256(bytes32(body[196:228]));
        require(
            expirationBlock == 0 || expirationBlock > block.number,
            "Message expired and must be re-signed"
        );
        uint256 amount = uint256(bytes32(body[68:100]));
        uint256 fee = uint256(bytes32(body[164:196]));
        require(fee == 0 || fee < amount, "Fee equals or exceeds amount");
        require(fee <= uint256(bytes32(body[132:164])), "Fee exceeds max fee");

        bytes32 burnToken = bytes32(body[4:36]);
        address mintRecipient = address(uint160(uint256(bytes32(body[36:68]))));
        address localToken =
            remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, burnToken))];
        require(localToken != address(0), "Mint token not supported");
        IMintBurnToken token = IMintBurnToken(localToken);
        require(token.mint(mintRecipient, amount - fee), "Mint failed");
        if (fee > 0) {
            require(token.mint(feeRecipient, fee), "Mint failed");
        }
        emit MintAndWithdraw(mintRecipient, amount - fee, localToken, fee);
        return true;
    }
}
